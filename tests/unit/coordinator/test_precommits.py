"""Which pre-commit reports the leader accepts (`domain/precommits.py`), and the other
ownership and pipeline decisions the store applies (`membership`, `pipelines`,
`assignment`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    LeaderEpoch,
    PipelineId,
    TaskId,
    TransactionalId,
)
from lockgate.common.model.offsets import OffsetRange, TopicPartition
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.coordinator.domain.assignment import assignment_changes
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit, TaskTrigger
from lockgate.coordinator.domain.errors import (
    FailedPrecondition,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    StaleGeneration,
)
from lockgate.coordinator.domain.membership import check_executor_session
from lockgate.coordinator.domain.pipelines import (
    PipelineRecord,
    TaskRecord,
    TaskSplitPlan,
    check_config_version,
    check_offsets_resettable,
    check_reset_offsets,
    check_task_restartable,
    plan_task_split,
    restart_state,
    restarts_for_new_config,
    tasks_to_restart,
)
from lockgate.coordinator.domain.precommits import PrecommitSnapshot, accept_precommits
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.domain.tasks import split_partitions

C = CheckpointId
P = PipelineId("p")
E1, E2 = ExecutorId("e1"), ExecutorId("e2")
T0, T1 = TaskId("p/0"), TaskId("p/1")
KEY = (P, C(1))
SINK = "127.0.0.1:9092"
RESUME = {TopicPartition("in", 0): 5, TopicPartition("in", 1): 5}


def task(task_id: TaskId, executor: ExecutorId | None = E1, generation: int = 1) -> TaskRecord:
    index = int(task_id.rsplit("/", 1)[1])
    return TaskRecord(
        task_id=task_id,
        pipeline_id=P,
        task_index=index,
        partitions=(TopicPartition("in", index),),
        executor_id=executor,
        generation=Generation(generation),
        state=TaskState.RUNNING,
        state_executor_id=None,
        state_executor_generation=None,
        last_error=None,
        updated_at_ms=0,
    )


def checkpoint(
    state: CheckpointState = CheckpointState.TRIGGERED,
    precommitted: frozenset[TaskId] = frozenset(),
) -> CheckpointRecord:
    return CheckpointRecord(
        pipeline_id=P,
        checkpoint_id=C(1),
        state=state,
        leader_epoch=LeaderEpoch(1),
        tasks=tuple(
            TaskTrigger(t, Generation(1), E1, f"lockgate-p-{t[-1]}-g1-0", 0) for t in (T0, T1)
        ),
        precommitted=precommitted,
        triggered_at_ms=0,
        completed_at_ms=None,
        committed_at_ms=None,
        aborted_at_ms=None,
        abort_reason=None,
    )


def report(task_id: TaskId = T0, **changes: object) -> Precommit:
    base = Precommit(
        pipeline_id=P,
        checkpoint_id=C(1),
        task_id=task_id,
        task_generation=Generation(1),
        executor_id=E1,
        executor_generation=Generation(3),
        offsets=(OffsetRange("in", int(task_id[-1]), 5, 10),),
        handles=(TransactionHandle(f"lockgate-p-{task_id[-1]}-g1-0-0", 7, 0, SINK),),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def accept(
    *reports: Precommit,
    record: CheckpointRecord | None = None,
    generations: dict[ExecutorId, Generation] | None = None,
    tasks: dict[TaskId, TaskRecord] | None = None,
) -> dict[tuple[PipelineId, CheckpointId], tuple[Precommit, ...]]:
    return accept_precommits(
        reports,
        PrecommitSnapshot(
            checkpoints={KEY: checkpoint() if record is None else record},
            executor_generations={E1: Generation(3)} if generations is None else generations,
            tasks={T0: task(T0), T1: task(T1)} if tasks is None else tasks,
            resume_offsets={KEY: RESUME},
            sink_servers={P: SINK},
            checkpoint_states={},  # the rules do not read it
        ),
    )


def test_fresh_reports_are_accepted_once_and_retries_are_left_out() -> None:
    first = report(T0)
    assert accept(first, report(T1), first) == {KEY: (first, report(T1))}
    done = checkpoint(precommitted=frozenset({T0}))
    assert accept(first, record=done) == {}
    # A retry of a pre-commit N already recorded is fine even once N moved on.
    assert accept(first, record=checkpoint(CheckpointState.COMPLETE, frozenset({T0}))) == {}


def test_reports_of_replaced_sessions_and_moved_tasks_are_refused() -> None:
    with pytest.raises(StaleGeneration, match="not registered"):
        accept(report(), generations={})
    with pytest.raises(StaleGeneration, match="executor e1"):
        accept(report(executor_generation=Generation(2)))
    with pytest.raises(StaleGeneration, match="in checkpoint 1"):
        accept(report(task_generation=Generation(2)))
    with pytest.raises(StaleGeneration, match="assigned to e2"):
        accept(report(), tasks={T0: task(T0, executor=E2)})
    # Even a retried report of a zombie is refused, not acknowledged.
    with pytest.raises(StaleGeneration):
        accept(
            report(),
            record=checkpoint(precommitted=frozenset({T0})),
            tasks={T0: task(T0, generation=2)},
        )


def test_reports_of_unknown_checkpoints_and_tasks_are_not_found() -> None:
    with pytest.raises(NotFound, match="no checkpoint 1"):
        accept_precommits(
            [report()],
            PrecommitSnapshot(
                checkpoints={KEY: None},
                executor_generations={},
                tasks={},
                resume_offsets={},
                sink_servers={},
                checkpoint_states={},  # the rules do not read it
            ),
        )
    with pytest.raises(NotFound, match="not part of checkpoint"):
        accept(report(TaskId("p/7")))
    with pytest.raises(NotFound, match="no task"):
        accept(report(), tasks={})


def test_an_aborted_checkpoint_and_a_foreign_transactional_id_are_refused() -> None:
    with pytest.raises(FailedPrecondition, match="abort this pre-commit") as aborted:
        accept(report(), record=checkpoint(CheckpointState.ABORTED))
    assert aborted.value.reason == "CHECKPOINT_NOT_TRIGGERED"
    # Another slot, another generation's slot (a zombie's), a slot whose number starts
    # with the allotted one, the id of the scheme before generations, and a write
    # partition number that is a digit to str.isdigit() only.
    for foreign_id in (
        "lockgate-p-0-g1-1-0",
        "lockgate-p-0-g0-0-0",
        "lockgate-p-0-g1-00",
        "lockgate-p-0-g10-0-0",
        "lockgate-p-0-0-0",
        "lockgate-p-0-g1-0-²",
    ):
        wrong = report(handles=(TransactionHandle(foreign_id, 7, 0),))
        with pytest.raises(InvalidArgument) as foreign:
            accept(wrong)
        assert foreign.value.reason == "PRECOMMIT_MISMATCH", foreign_id
        assert [v.field for v in foreign.value.violations] == [
            "sink_handles[0].kafka.transactional_id"
        ]
    # The allotted id itself and its write partitions' ids are the task's own.
    for own in ("lockgate-p-0-g1-0", "lockgate-p-0-g1-0-12"):
        assert accept(report(handles=(TransactionHandle(own, 7, 0),)))


def refused_fields(forged: Precommit) -> dict[str, str]:
    with pytest.raises(InvalidArgument) as refused:
        accept(forged)
    assert refused.value.reason == "PRECOMMIT_MISMATCH"
    return {v.field: v.description for v in refused.value.violations}


def test_a_range_not_starting_where_the_previous_checkpoint_ended_is_refused() -> None:
    for start in (0, 4, 6):
        found = refused_fields(report(offsets=(OffsetRange("in", 0, start, 10),)))
        assert list(found) == ["source_ranges[0].start_offset"]
        assert f"is {start}, but in[0] resumes at 5" in found["source_ranges[0].start_offset"]


def test_a_partition_without_a_stored_offset_may_start_anywhere() -> None:
    # No complete checkpoint yet: the executor resolved `starting_offsets` itself.
    fresh = task(T0)
    forged = report(offsets=(OffsetRange("in", 0, 42, 50),))
    assert accept_precommits(
        [forged],
        PrecommitSnapshot(
            checkpoints={KEY: checkpoint()},
            executor_generations={E1: Generation(3)},
            tasks={T0: fresh},
            resume_offsets={},
            sink_servers={P: SINK},
            checkpoint_states={},  # the rules do not read it
        ),
    ) == {KEY: (forged,)}


def test_a_range_of_another_tasks_partition_or_a_partition_twice_is_refused() -> None:
    found = refused_fields(report(offsets=(OffsetRange("in", 1, 5, 10),)))
    assert found == {
        "source_ranges[0]": "in[1] is not a partition of task p/0 (its partitions: in[0])"
    }
    found = refused_fields(report(offsets=(OffsetRange("other", 0, 0, 10),)))
    assert list(found) == ["source_ranges[0]"]
    twice = (OffsetRange("in", 0, 5, 10), OffsetRange("in", 0, 5, 7))
    assert refused_fields(report(offsets=twice)) == {"source_ranges[1]": "in[0] is reported twice"}


def test_a_handle_on_another_cluster_is_refused_and_an_unnamed_one_is_the_sinks() -> None:
    elsewhere = TransactionHandle(TransactionalId("lockgate-p-0-g1-0-0"), 7, 0, "evil:9092")
    found = refused_fields(report(handles=(elsewhere,)))
    assert list(found) == ["sink_handles[0].kafka.bootstrap_servers"]
    assert (
        "'evil:9092' is not the pipeline's sink cluster"
        in found["sink_handles[0].kafka.bootstrap_servers"]
    )
    unnamed = TransactionHandle(TransactionalId("lockgate-p-0-g1-0-0"), 7, 0)
    assert accept(report(handles=(unnamed,)))


def test_every_forged_field_of_one_report_is_named_at_once() -> None:
    forged = report(
        offsets=(OffsetRange("in", 0, 0, 10), OffsetRange("in", 3, 0, 1)),
        handles=(TransactionHandle(TransactionalId("lockgate-q-0-g1-0"), 7, 0, "evil:1"),),
    )
    assert sorted(refused_fields(forged)) == [
        "sink_handles[0].kafka.bootstrap_servers",
        "sink_handles[0].kafka.transactional_id",
        "source_ranges[0].start_offset",
        "source_ranges[1]",
    ]


def test_executor_session_check() -> None:
    check_executor_session(E1, reported=Generation(2), current=Generation(2))
    with pytest.raises(StaleGeneration):
        check_executor_session(E1, reported=Generation(1), current=Generation(2))


def test_config_version_and_offset_reset_preconditions() -> None:
    spec = parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
        }
    )
    stopped = PipelineRecord(P, spec, 4, TargetState.STOPPED, C(3), 0, 0)
    check_config_version(stopped, None)
    check_config_version(stopped, 4)
    with pytest.raises(FailedPrecondition, match="config version 4, not 3"):
        check_config_version(stopped, 3)
    check_offsets_resettable(stopped, {C(1): CheckpointState.ABORTED})
    with pytest.raises(FailedPrecondition, match="in flight"):
        check_offsets_resettable(stopped, {C(2): CheckpointState.COMPLETE})
    running = dataclasses.replace(stopped, target_state=TargetState.RUNNING)
    with pytest.raises(FailedPrecondition, match="stop it"):
        check_offsets_resettable(running, {})
    check_reset_offsets(None)
    with pytest.raises(InvalidArgument, match=">= 0"):
        check_reset_offsets({TopicPartition("in", 0): -1})


def test_restart_takes_all_or_only_failed_tasks() -> None:
    failed = dataclasses.replace(task(T1), state=TaskState.FAILED)
    assert tasks_to_restart([task(T0), failed], only_failed=True) == [failed]
    assert tasks_to_restart([task(T0), failed], only_failed=False) == [task(T0), failed]
    # An unassigned task has no instance to restart: it starts when it is assigned.
    unassigned = dataclasses.replace(task(T0), state=TaskState.UNASSIGNED)
    with pytest.raises(IllegalTransition):
        tasks_to_restart([unassigned], only_failed=False)


def test_a_restarted_or_reconfigured_task_shows_restarting_unless_never_started() -> None:
    running = task(T0)
    failed = dataclasses.replace(task(T1), state=TaskState.FAILED)
    unassigned = dataclasses.replace(task(T0), state=TaskState.UNASSIGNED)
    assert restart_state(TaskState.FAILED) is TaskState.RESTARTING
    assert restart_state(TaskState.UNASSIGNED) is TaskState.UNASSIGNED
    # An update restarts every task: a task kept at its generation would keep the old config.
    assert restarts_for_new_config([running, failed, unassigned]) == [
        (running, TaskState.RESTARTING),
        (failed, TaskState.RESTARTING),
        (unassigned, TaskState.UNASSIGNED),
    ]
    spec = parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
        }
    )
    pipeline = PipelineRecord(P, spec, 1, TargetState.RUNNING, C(3), 0, 0)
    assert check_task_restartable(pipeline, failed) is TaskState.RESTARTING
    stopped = dataclasses.replace(pipeline, target_state=TargetState.STOPPED)
    with pytest.raises(FailedPrecondition, match="resume the pipeline") as refused:
        check_task_restartable(stopped, failed)
    assert refused.value.reason == "PIPELINE_STOPPED"


@given(
    st.sets(st.integers(0, 5), max_size=6),
    st.sets(st.integers(0, 5), max_size=6),
    st.integers(1, 4),
    st.integers(1, 4),
)
def test_a_resplit_touches_only_what_changed(
    old_parts: set[int], new_parts: set[int], old_max: int, new_max: int
) -> None:
    old = split_partitions([TopicPartition("in", p) for p in old_parts], old_max)
    new = split_partitions([TopicPartition("in", p) for p in new_parts], new_max)
    existing = [
        dataclasses.replace(task(TaskId(f"p/{s.index}")), partitions=s.partitions) for s in old
    ]
    plan = plan_task_split(existing, new)
    assert set(plan.removed) == {TaskId(f"p/{s.index}") for s in old} - {
        TaskId(f"p/{s.index}") for s in new
    }
    assert {s.index for s in plan.added} == {s.index for s in new} - {s.index for s in old}
    old_by_index = {s.index: s.partitions for s in old}
    for task_id, split in plan.changed:
        assert old_by_index[split.index] != split.partitions and task_id == f"p/{split.index}"
    unchanged = {s.index for s in new if old_by_index.get(s.index) == s.partitions}
    assert unchanged.isdisjoint({s.index for _, s in plan.changed})
    assert plan_task_split(existing, old) == TaskSplitPlan(removed=(), added=(), changed=())


def test_assignment_changes_name_moved_tasks_and_refuse_unknown_ones() -> None:
    tasks = [task(T0, executor=E1), task(T1, executor=None)]
    assert assignment_changes(tasks, {E1: {T0}}) == []
    assert assignment_changes(tasks, {E2: {T0, T1}}) == tasks
    assert assignment_changes(tasks, {}) == [tasks[0]]
    with pytest.raises(NotFound, match="unknown tasks"):
        assignment_changes(tasks, {E1: {TaskId("p/9")}})
