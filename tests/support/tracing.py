"""A tracer double for tests of what a path does with traces off."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import NoOpTracer, Span


class CountingNoOpTracer(NoOpTracer):
    """A no-op tracer (tracing off) that counts the spans asked of it."""

    def __init__(self) -> None:
        self.asked = 0

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        self.asked += 1
        return super().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        self.asked += 1
        return super().start_as_current_span(*args, **kwargs)
