"""The executor's pre-commit batch runs after the TriggerCheckpoint call returned, on its
task's thread: it must still join the call's trace (the leader's checkpoint trace), as a
child of the call's span, with what it read and wrote and its Spark jobs."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.tracing import CountingNoOpTracer
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    WAIT_S,
    start_worker,
    stop_worker,
    trigger,
)


def test_the_batch_span_is_a_child_of_the_trigger_call_that_started_it() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    runtime, coordinator, data_plane = start_worker(tracer)
    try:
        with tracer.start_as_current_span("TriggerCheckpoint") as call:
            trigger(runtime, 1)
        # The call has returned; only now does the batch run and report.
        data_plane.events(1)[1].set()
        wait_for("the pre-commit report", lambda: coordinator.precommits == [1], timeout_s=WAIT_S)
        (batch,) = wait_for(
            "the batch span",
            lambda: [
                s for s in exporter.get_finished_spans() if s.name == "lockgate.executor.precommit"
            ],
            timeout_s=WAIT_S,
        )
    finally:
        stop_worker(runtime, data_plane)
    context = call.get_span_context()
    assert batch.context.trace_id == context.trace_id
    assert batch.parent is not None and batch.parent.span_id == context.span_id
    assert batch.attributes is not None
    assert batch.attributes["lockgate.checkpoint.id"] == 1
    assert batch.attributes["lockgate.task.id"] == "p/0"
    assert tuple(batch.attributes["lockgate.spark.job_ids"]) == ()  # no Spark in this double
    assert batch.attributes["lockgate.records.read"] == 0


def test_with_traces_off_a_batch_makes_no_span() -> None:
    """Once per task and checkpoint, a span made and ended for nothing cost the executor a
    few per cent of its CPU in the round-trip bench."""
    tracer = CountingNoOpTracer()
    runtime, coordinator, data_plane = start_worker(tracer)
    try:
        trigger(runtime, 1)
        data_plane.events(1)[1].set()
        wait_for("the pre-commit report", lambda: coordinator.precommits == [1], timeout_s=WAIT_S)
    finally:
        stop_worker(runtime, data_plane)
    assert tracer.asked == 0
