"""The leader's checkpoint traces (herder/traces.py), with an in-memory exporter: one root
per checkpoint, its steps as children, the abort reason on the root and its abort span, a new
root linked to the recovery for a checkpoint another leader triggered, a bounded map."""

from __future__ import annotations

import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from lockgate.common.model.ids import CheckpointId, LeaderEpoch, PipelineId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.herder.traces import CheckpointTraces
from tests.support.tracing import CountingNoOpTracer

P = PipelineId("orders")


def _traces(max_open: int = 1024) -> tuple[CheckpointTraces, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return CheckpointTraces(provider.get_tracer("test"), max_open=max_open), exporter


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_committed_checkpoint_is_one_trace_with_its_steps_under_the_root() -> None:
    traces, exporter = _traces()
    traces.triggered(P, CheckpointId(1), leader_epoch=3)
    with traces.step("lockgate.checkpoint.trigger", P, CheckpointId(1), leader_epoch=3):
        pass
    traces.completed(P, CheckpointId(1), started_ns=time.time_ns())
    traces.completed(P, CheckpointId(1), started_ns=time.time_ns())  # a second report
    with traces.step("lockgate.checkpoint.commit", P, CheckpointId(1), leader_epoch=3):
        pass
    traces.committed(P, CheckpointId(1))

    (root,) = _named(exporter, "lockgate.checkpoint")
    assert root.parent is None and root.status.status_code is StatusCode.OK
    assert root.attributes is not None
    assert root.attributes["lockgate.checkpoint.id"] == 1
    assert root.attributes["lockgate.leader_epoch"] == 3
    assert root.attributes["lockgate.checkpoint.state"] == "COMMITTED"
    steps = [s for s in exporter.get_finished_spans() if s is not root]
    assert sorted(s.name for s in steps) == [
        "lockgate.checkpoint.commit",
        "lockgate.checkpoint.complete",
        "lockgate.checkpoint.trigger",
    ]
    for step in steps:
        assert step.parent is not None and step.parent.span_id == root.context.span_id
        assert step.context.trace_id == root.context.trace_id
    assert traces.open_checkpoints() == []


def test_each_checkpoint_gets_its_own_trace() -> None:
    traces, exporter = _traces()
    traces.triggered(P, CheckpointId(1), leader_epoch=1)
    traces.triggered(P, CheckpointId(2), leader_epoch=1)
    traces.committed(P, CheckpointId(1))
    traces.committed(P, CheckpointId(2))
    roots = _named(exporter, "lockgate.checkpoint")
    assert len({r.context.trace_id for r in roots}) == 2


def test_an_aborted_checkpoint_says_why_on_its_root_and_abort_span() -> None:
    traces, exporter = _traces()
    traces.triggered(P, CheckpointId(4), leader_epoch=2)
    traces.settle({(P, CheckpointId(4)): ("ABORTED", "timed out after 1500 ms")})

    (root,) = _named(exporter, "lockgate.checkpoint")
    (abort,) = _named(exporter, "lockgate.checkpoint.abort")
    for span in (root, abort):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["lockgate.abort_reason"] == "timed out after 1500 ms"
    assert abort.parent is not None and abort.parent.span_id == root.context.span_id
    # The abort calls sent afterwards still join the ended root's trace.
    with traces.step("lockgate.checkpoint.abort_transactions", P, CheckpointId(4), leader_epoch=2):
        pass
    (sent,) = _named(exporter, "lockgate.checkpoint.abort_transactions")
    assert sent.context.trace_id == root.context.trace_id


def test_settle_leaves_undecided_checkpoints_open() -> None:
    traces, _ = _traces()
    traces.triggered(P, CheckpointId(1), leader_epoch=1)
    traces.settle({})
    assert traces.open_checkpoints() == [(P, CheckpointId(1))]


def test_the_open_checkpoints_are_settled_from_one_read_of_their_states() -> None:
    """The leader's pass reads every open checkpoint's state at once, without its tasks:
    the decided ones end, a missing one (its pipeline deleted) ends ABORTED, the rest stay
    open."""
    traces, exporter = _traces()
    for n in (1, 2, 3, 4):
        traces.triggered(P, CheckpointId(n), leader_epoch=1)
    sql = {
        1: CheckpointState.COMMITTED,
        2: CheckpointState.TRIGGERED,
        3: CheckpointState.ABORTED,
        # 4: gone with its pipeline
    }
    reads: list[list[tuple[PipelineId, CheckpointId]]] = []

    def read(keys: Sequence[tuple[PipelineId, CheckpointId]]) -> list[CheckpointRecord]:
        reads.append(list(keys))
        return [
            CheckpointRecord(
                pipeline_id=p,
                checkpoint_id=c,
                state=sql[int(c)],
                leader_epoch=LeaderEpoch(1),
                tasks=(),
                precommitted=frozenset(),
                triggered_at_ms=0,
                completed_at_ms=None,
                committed_at_ms=None,
                aborted_at_ms=None,
                abort_reason="a test abort" if sql[int(c)] is CheckpointState.ABORTED else None,
            )
            for p, c in keys
            if int(c) in sql
        ]

    traces.settle_decided(read)
    assert reads == [[(P, CheckpointId(n)) for n in (1, 2, 3, 4)]], "one read of them all"
    assert traces.open_checkpoints() == [(P, CheckpointId(2))]
    ended = {
        r.attributes["lockgate.checkpoint.id"]: (
            r.attributes["lockgate.checkpoint.state"],
            r.attributes.get("lockgate.abort_reason"),
        )
        for r in _named(exporter, "lockgate.checkpoint")
        if r.attributes is not None
    }
    assert ended == {
        1: ("COMMITTED", None),
        3: ("ABORTED", "a test abort"),
        4: ("ABORTED", "pipeline deleted"),
    }
    traces.settle_decided(read)
    assert reads[-1] == [(P, CheckpointId(2))], "the next pass reads the one still open"


def test_a_checkpoint_of_an_earlier_leader_starts_a_new_trace_linked_to_the_recovery() -> None:
    traces, exporter = _traces()
    with (
        traces.recovery(leader_epoch=5) as recovery,
        traces.step("lockgate.checkpoint.commit", P, CheckpointId(9), leader_epoch=5),
    ):
        pass
    traces.committed(P, CheckpointId(9))
    (root,) = _named(exporter, "lockgate.checkpoint")
    assert root.attributes is not None and root.attributes["lockgate.checkpoint.inherited"]
    assert root.context.trace_id != recovery.get_span_context().trace_id
    assert [link.context.span_id for link in root.links] == [recovery.get_span_context().span_id]


def test_at_most_max_open_roots_are_kept() -> None:
    traces, exporter = _traces(max_open=2)
    for checkpoint_id in (1, 2, 3):
        traces.triggered(P, CheckpointId(checkpoint_id), leader_epoch=1)
    assert traces.open_checkpoints() == [(P, CheckpointId(2)), (P, CheckpointId(3))]
    (evicted,) = _named(exporter, "lockgate.checkpoint")
    assert evicted.attributes is not None
    assert evicted.attributes["lockgate.checkpoint.state"] == "UNKNOWN"


def test_nothing_is_kept_or_made_when_tracing_is_off() -> None:
    """Per report and per step, no span is made for nothing (a few per cent of the
    leader's CPU in the round-trip bench)."""
    tracer = CountingNoOpTracer()
    traces = CheckpointTraces(tracer)
    traces.triggered(P, CheckpointId(1), leader_epoch=1)
    with traces.report(P, CheckpointId(1), task_id="orders-0", leader_epoch=1) as span:
        span.set_attribute("lockgate.checkpoint.state", "TRIGGERED")
    with traces.step("lockgate.checkpoint.commit", P, CheckpointId(1), leader_epoch=1) as step:
        assert not step.is_recording()
    traces.completed(P, CheckpointId(1), started_ns=time.time_ns())
    traces.committed(P, CheckpointId(1))
    assert traces.open_checkpoints() == []
    assert tracer.asked == 0


def test_a_checkpoint_a_new_leader_aborts_in_recovery_gets_a_trace_that_says_why() -> None:
    traces, exporter = _traces()
    with traces.recovery(leader_epoch=6) as recovery:
        traces.adopt(P, CheckpointId(12), leader_epoch=6)
    traces.settle({(P, CheckpointId(12)): ("ABORTED", "leader changed")})
    (root,) = _named(exporter, "lockgate.checkpoint")
    assert root.attributes is not None
    assert root.attributes["lockgate.abort_reason"] == "leader changed"
    assert root.attributes["lockgate.checkpoint.inherited"] is True
    assert [link.context.span_id for link in root.links] == [recovery.get_span_context().span_id]
