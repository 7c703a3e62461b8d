"""The leader's trigger calls to one executor: how `send_triggers` splits and answers them
(the calls themselves are tested against real executors in the integration tier)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from lockgate.common.model.ids import CoordinatorId, ExecutorId, Generation, LeaderEpoch
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.herder.executors import (
    TRIGGERS_PER_CALL,
    ExecutorCallFailed,
    ExecutorClient,
    PipelineTrigger,
    TriggerResult,
)


class SplitRecorder(ExecutorClient):
    """Records each call's triggers; the call whose first pipeline is `failing` fails."""

    def __init__(self, failing: str = "") -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.failing = failing

    def _send_trigger_batch(
        self, fence: Fence, executor: ExecutorRecord, triggers: Sequence[PipelineTrigger]
    ) -> Callable[[], list[list[TriggerResult] | ExecutorCallFailed]]:
        names = [t.pipeline_name for t in triggers]
        self.calls.append(names)
        if names[0] == self.failing:
            failure = ExecutorCallFailed("unreachable")
            return lambda: [failure] * len(names)
        return lambda: [
            [TriggerResult(task_index=int(n[1:]), accepted=True, outcome="", reason="")]
            for n in names
        ]


def trigger(name: str) -> PipelineTrigger:
    return PipelineTrigger(
        pipeline_name=name,
        checkpoint_id=1,
        config_version=1,
        tasks=(),
        timeout_ms=1_000,
        trace_context={},
    )


def send(client: ExecutorClient, count: int) -> list[Callable[[], list[TriggerResult]]]:
    executor = ExecutorRecord(
        executor_id=ExecutorId("e1"),
        address="127.0.0.1:1",
        generation=Generation(1),
        registered_at_ms=0,
        last_heartbeat_ms=0,
    )
    return client.send_triggers(
        fence=Fence(holder=CoordinatorId("c1"), leader_epoch=LeaderEpoch(1)),
        executor=executor,
        triggers=[trigger(f"p{i}") for i in range(count)],
    )


def test_triggers_over_one_calls_limit_go_in_several_calls_each_answered_in_order() -> None:
    client = SplitRecorder()
    answers = send(client, TRIGGERS_PER_CALL + 44)
    assert [len(c) for c in client.calls] == [TRIGGERS_PER_CALL, 44]
    assert [a()[0].task_index for a in answers] == list(range(TRIGGERS_PER_CALL + 44))


def test_a_failed_call_fails_only_its_own_triggers() -> None:
    client = SplitRecorder(failing=f"p{TRIGGERS_PER_CALL}")
    answers = send(client, TRIGGERS_PER_CALL + 2)
    assert answers[0]()[0].task_index == 0
    for answer in answers[TRIGGERS_PER_CALL:]:
        with pytest.raises(ExecutorCallFailed, match="unreachable"):
            answer()
