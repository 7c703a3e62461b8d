"""One trace per checkpoint, on the leader (issue 12): the root span `lockgate.checkpoint`
opens when the leader triggers N and ends when N is COMMITTED or ABORTED; the trigger, the
reports, the COMPLETE write, each commit attempt and the abort are its descendants. The
executors' batch and commit spans join the same trace through the W3C `traceparent` the
gRPC interceptors put on TriggerCheckpoint and CommitCheckpoint.

Rules and known limits:
- The root's span context lives in this process's memory only (no SQL): a replica that
  becomes leader and meets a checkpoint it did not trigger (recovery re-commits a COMPLETE
  one, or aborts a TRIGGERED one) opens a new root for it, marked
  `lockgate.checkpoint.inherited`, with a span link to its own `lockgate.leader.recovery`
  span: the old trace is not continued, its id is unknown here.
- Which state a checkpoint ended in, and why it aborted, is read back from SQL (`settle`,
  once per pass of the work loop), so every abort path -- timeout, a failed or refused
  trigger, a failure report, a reassigned or restarted task, a cascade, a new leader --
  ends its root with the reason the store wrote.
- At most `max_open` roots are kept; beyond that the oldest is ended (marked
  `lockgate.checkpoint.state` = `UNKNOWN`), so a pipeline whose checkpoints are never
  decided cannot grow the map without bound.
- With tracing off nothing is kept, and no span is made (`records_spans`): the per-report
  and per-step spans were a few per cent of the leader's CPU for nothing.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.common.telemetry import records_spans
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.states import CheckpointState

#: Attribute names, one place (the README's table lists them with their meaning).
PIPELINE = "lockgate.pipeline"
CHECKPOINT_ID = "lockgate.checkpoint.id"
LEADER_EPOCH = "lockgate.leader_epoch"
STATE = "lockgate.checkpoint.state"
INHERITED = "lockgate.checkpoint.inherited"
ABORT_REASON = "lockgate.abort_reason"
EXECUTOR_ID = "lockgate.executor.id"
TASK_ID = "lockgate.task.id"

_Key = tuple[PipelineId, CheckpointId]


@dataclass
class _Root:
    span: Span
    completed: bool = False


#: How many ended roots' span contexts are remembered, so the abort calls that follow an
#: ABORTED checkpoint still join its trace.
_ENDED_KEPT = 256


class CheckpointTraces:
    """The leader's checkpoint traces; thread-safe (the work loop and report threads)."""

    def __init__(self, tracer: trace.Tracer | None = None, *, max_open: int = 1024) -> None:
        self._tracer = tracer or trace.get_tracer("lockgate.coordinator")
        self._max_open = max_open
        self._lock = threading.Lock()
        self._roots: OrderedDict[_Key, _Root] = OrderedDict()
        self._ended: OrderedDict[_Key, trace.SpanContext] = OrderedDict()
        self._recovery: trace.SpanContext | None = None

    # ------------------------------------------------------------------ roots

    def triggered(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, *, leader_epoch: int
    ) -> None:
        """Open checkpoint N's root span: the leader has just written it TRIGGERED."""
        if not records_spans(self._tracer):
            return
        span = self._tracer.start_span(
            "lockgate.checkpoint",
            context=otel_context.Context(),  # a new trace, whatever is current
            kind=SpanKind.INTERNAL,
            attributes={
                PIPELINE: pipeline_id,
                CHECKPOINT_ID: int(checkpoint_id),
                LEADER_EPOCH: leader_epoch,
            },
        )
        self._keep((pipeline_id, checkpoint_id), _Root(span))

    def _keep(self, key: _Key, root: _Root) -> None:
        if not root.span.is_recording():
            return
        evicted: list[_Root] = []
        with self._lock:
            self._roots[key] = root
            while len(self._roots) > self._max_open:
                evicted.append(self._roots.popitem(last=False)[1])
        for old in evicted:
            old.span.set_attribute(STATE, "UNKNOWN")
            old.span.end()

    def _root(self, key: _Key, *, leader_epoch: int) -> _Root:
        with self._lock:
            root = self._roots.get(key)
        if root is not None:
            return root
        links = [Link(self._recovery)] if self._recovery is not None else []
        span = self._tracer.start_span(
            "lockgate.checkpoint",
            context=otel_context.Context(),
            links=links,
            attributes={
                PIPELINE: key[0],
                CHECKPOINT_ID: int(key[1]),
                LEADER_EPOCH: leader_epoch,
                INHERITED: True,
            },
        )
        root = _Root(span)
        self._keep(key, root)
        return root

    def _pop(self, key: _Key) -> _Root | None:
        with self._lock:
            root = self._roots.pop(key, None)
            if root is not None:
                self._ended[key] = root.span.get_span_context()
                while len(self._ended) > _ENDED_KEPT:
                    self._ended.popitem(last=False)
        return root

    def _parent(self, key: _Key, *, leader_epoch: int) -> otel_context.Context:
        """N's root as a parent context: open, ended (its context remembered), or a new
        inherited root."""
        with self._lock:
            ended = self._ended.get(key)
        if ended is not None and key not in self._roots:
            return trace.set_span_in_context(trace.NonRecordingSpan(ended))
        return trace.set_span_in_context(self._root(key, leader_epoch=leader_epoch).span)

    def adopt(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, *, leader_epoch: int
    ) -> None:
        """Make sure N has a root: a checkpoint this replica did not trigger gets a new,
        inherited one (a new leader's recovery adopts every checkpoint it decides)."""
        self._root((pipeline_id, checkpoint_id), leader_epoch=leader_epoch)

    def committed(self, pipeline_id: PipelineId, checkpoint_id: CheckpointId) -> None:
        """N is COMMITTED: end its root, status OK."""
        root = self._pop((pipeline_id, checkpoint_id))
        if root is not None:
            root.span.set_attribute(STATE, "COMMITTED")
            root.span.set_status(Status(StatusCode.OK))
            root.span.end()

    def aborted(self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, *, reason: str) -> None:
        """N is ABORTED: an `lockgate.checkpoint.abort` span and the root both say why
        (status ERROR, `lockgate.abort_reason`), then the root ends."""
        root = self._pop((pipeline_id, checkpoint_id))
        if root is None:
            return
        parent = trace.set_span_in_context(root.span)
        abort = self._tracer.start_span(
            "lockgate.checkpoint.abort", context=parent, attributes={ABORT_REASON: reason}
        )
        abort.set_status(Status(StatusCode.ERROR, reason))
        abort.end()
        root.span.set_attribute(STATE, "ABORTED")
        root.span.set_attribute(ABORT_REASON, reason)
        root.span.set_status(Status(StatusCode.ERROR, reason))
        root.span.end()

    def open_checkpoints(self) -> list[_Key]:
        """The checkpoints whose root is still open, oldest first (for `settle`)."""
        with self._lock:
            return list(self._roots)

    def settle(self, finals: Mapping[_Key, tuple[str, str | None]]) -> None:
        """End the roots of checkpoints now decided for good: `finals` maps each to its
        state name and abort reason as SQL has them (other states are left open)."""
        for (pipeline_id, checkpoint_id), (state, reason) in finals.items():
            if state == "COMMITTED":
                self.committed(pipeline_id, checkpoint_id)
            elif state == "ABORTED":
                self.aborted(pipeline_id, checkpoint_id, reason=reason or "aborted")

    def settle_decided(self, read: Callable[[Sequence[_Key]], Iterable[CheckpointRecord]]) -> None:
        """`settle` every open checkpoint that `read` (their states in SQL, without their
        tasks, in one read) finds COMMITTED or ABORTED, or does not find (its pipeline was
        deleted). A read with tasks per open checkpoint was one read transaction per
        pipeline with a checkpoint in flight, on every pass of the leader."""
        opened = self.open_checkpoints()
        found = {(c.pipeline_id, c.checkpoint_id): c for c in read(opened)} if opened else {}
        finals: dict[_Key, tuple[str, str | None]] = {}
        for key in opened:
            if (record := found.get(key)) is None:
                finals[key] = ("ABORTED", "pipeline deleted")
            elif record.state in (CheckpointState.COMMITTED, CheckpointState.ABORTED):
                finals[key] = (record.state.name, record.abort_reason)
        self.settle(finals)

    def close(self) -> None:
        """End every open root (the replica stops leading or exits: `__main__` calls it on
        SIGTERM, before the server flushes telemetry)."""
        with self._lock:
            roots = list(self._roots.values())
            self._roots.clear()
            self._ended.clear()
        for root in roots:
            root.span.set_attribute(STATE, "UNKNOWN")
            root.span.end()

    # ------------------------------------------------------------------ steps

    @contextmanager
    def step(
        self,
        name: str,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        *,
        leader_epoch: int,
        attributes: Mapping[str, str | int] | None = None,
    ) -> Iterator[Span]:
        """Run a leader step of N (`lockgate.checkpoint.commit`, ...) as the current span,
        a child of N's root: gRPC calls made inside carry its context."""
        span = self.start_step(
            name, pipeline_id, checkpoint_id, leader_epoch=leader_epoch, attributes=attributes
        )
        with trace.use_span(span, end_on_exit=True):
            yield span

    def start_step(
        self,
        name: str,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        *,
        leader_epoch: int,
        attributes: Mapping[str, str | int] | None = None,
    ) -> Span:
        """`step`'s span, started and not made current: for the trigger, whose calls are
        sent by the pass (`trace_context`) and whose job ends it later
        (`trace.use_span(span, end_on_exit=True)`)."""
        if not records_spans(self._tracer):
            return trace.INVALID_SPAN
        return self._tracer.start_span(
            name,
            context=self._parent((pipeline_id, checkpoint_id), leader_epoch=leader_epoch),
            attributes={
                PIPELINE: pipeline_id,
                CHECKPOINT_ID: int(checkpoint_id),
                **(attributes or {}),
            },
        )

    @contextmanager
    def report(
        self,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        *,
        task_id: str,
        leader_epoch: int,
    ) -> Iterator[Span]:
        """A ReportPrecommit on the leader, as `lockgate.checkpoint.report_precommit`: a
        child of the incoming call's span when it carries N's trace (the executor's batch),
        else of N's root with a link to the incoming span."""
        if not records_spans(self._tracer):
            yield trace.INVALID_SPAN
            return
        root = self._parent((pipeline_id, checkpoint_id), leader_epoch=leader_epoch)
        incoming = trace.get_current_span().get_span_context()
        root_trace = trace.get_current_span(root).get_span_context().trace_id
        links: list[Link] = []
        if incoming.is_valid and incoming.trace_id == root_trace:
            parent = otel_context.get_current()
        else:
            parent = root
            if incoming.is_valid:
                links.append(Link(incoming))
        with self._tracer.start_as_current_span(
            "lockgate.checkpoint.report_precommit",
            context=parent,
            links=links,
            attributes={PIPELINE: pipeline_id, CHECKPOINT_ID: int(checkpoint_id), TASK_ID: task_id},
        ) as span:
            yield span

    def completed(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, *, started_ns: int
    ) -> None:
        """The write that made N COMPLETE (started at `started_ns`, ended now), once per N,
        as `lockgate.checkpoint.complete` under N's root."""
        with self._lock:
            root = self._roots.get((pipeline_id, checkpoint_id))
            if root is None or root.completed:
                return
            root.completed = True
        span = self._tracer.start_span(
            "lockgate.checkpoint.complete",
            context=trace.set_span_in_context(root.span),
            start_time=started_ns,
            attributes={PIPELINE: pipeline_id, CHECKPOINT_ID: int(checkpoint_id)},
        )
        span.end(end_time=time.time_ns())

    @contextmanager
    def recovery(self, *, leader_epoch: int) -> Iterator[Span]:
        """A new leader's recovery, as `lockgate.leader.recovery`; the roots it opens for
        inherited checkpoints (then and later) link to it."""
        with self._tracer.start_as_current_span(
            "lockgate.leader.recovery",
            context=otel_context.Context(),
            attributes={LEADER_EPOCH: leader_epoch},
        ) as span:
            context = span.get_span_context()
            self._recovery = context if context.is_valid else None
            yield span


__all__ = ["CheckpointTraces"]


def trace_context(span: Span) -> dict[str, str]:
    """The W3C context (`traceparent`, `tracestate`) that continues `span` in another
    process; empty for a span that records nothing."""
    carrier: dict[str, str] = {}
    if span.get_span_context().is_valid:
        propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier
