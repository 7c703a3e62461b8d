"""The executor's protobuf conversions: ``lockgate.v1`` messages <-> runtime values.

The one place, with the servicer and the coordinator client that use it, where the
executor touches ``*_pb2``: the runtime, the data planes and the committer take and return
plain values (:mod:`lockgate.executor.runtime.values`,
:mod:`lockgate.executor.dataplane.protocol`).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import timestamp_pb2

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.common.model.proto import (
    handle_from_proto,
    handle_to_proto,
    offset_range_to_proto,
    spec_from_proto,
)
from lockgate.executor.fencing import TriggerVerdict
from lockgate.executor.runtime.tasks import TaskPhase, TaskView
from lockgate.executor.runtime.values import (
    Assignment,
    CheckpointFailureReport,
    LeaderStamp,
    MembershipReply,
    PrecommitAnswer,
    PrecommitReport,
    ReportStamp,
    RestorePlan,
    TaskError,
    TaskFailureReport,
    TaskRef,
)
from lockgate.v1 import common_pb2, coordinator_pb2, executor_pb2

# -- transaction handles and offset ranges ----------------------------------------------


def handles_from_proto(
    handles: Iterable[common_pb2.SinkHandle], *, field_name: str
) -> tuple[TransactionHandle, ...]:
    """Every handle of a repeated field; errors name ``field_name[i]``."""
    return tuple(handle_from_proto(h, f"{field_name}[{i}]") for i, h in enumerate(handles))


# -- identities and tokens --------------------------------------------------------------


def task_ref_to_proto(task: TaskRef) -> common_pb2.TaskId:
    """The ``TaskId`` of a :class:`TaskRef`."""
    return common_pb2.TaskId(pipeline_name=task.pipeline_name, task_index=task.task_index)


def leader_from_proto(epoch: common_pb2.LeaderEpoch) -> LeaderStamp:
    """A ``LeaderEpoch`` as a :class:`LeaderStamp` (epoch 0: not set)."""
    return LeaderStamp(LeaderEpoch(epoch.epoch), epoch.leader_id)


def leader_to_proto(leader: LeaderStamp) -> common_pb2.LeaderEpoch:
    """The ``LeaderEpoch`` of a :class:`LeaderStamp`."""
    return common_pb2.LeaderEpoch(epoch=leader.epoch, leader_id=leader.leader_id)


VERDICT_TO_PROTO: Mapping[TriggerVerdict, executor_pb2.TriggerOutcome.ValueType] = {
    TriggerVerdict.ACCEPTED: executor_pb2.TRIGGER_OUTCOME_ACCEPTED,
    TriggerVerdict.DUPLICATE: executor_pb2.TRIGGER_OUTCOME_DUPLICATE,
    TriggerVerdict.STALE_GENERATION: executor_pb2.TRIGGER_OUTCOME_STALE_GENERATION,
    TriggerVerdict.NOT_ASSIGNED: executor_pb2.TRIGGER_OUTCOME_NOT_ASSIGNED,
    TriggerVerdict.NOT_READY: executor_pb2.TRIGGER_OUTCOME_NOT_READY,
}

# -- task status ------------------------------------------------------------------------

_PHASE_TO_PROTO: Mapping[TaskPhase, common_pb2.TaskState.ValueType] = {
    TaskPhase.RESTORING: common_pb2.TASK_STATE_RESTARTING,
    TaskPhase.RUNNING: common_pb2.TASK_STATE_RUNNING,
    TaskPhase.PAUSED: common_pb2.TASK_STATE_PAUSED,
    TaskPhase.FAILED: common_pb2.TASK_STATE_FAILED,
    TaskPhase.STOPPED: common_pb2.TASK_STATE_STOPPED,
}


def timestamp_to_proto(moment: datetime.datetime) -> timestamp_pb2.Timestamp:
    """The ``Timestamp`` of an aware datetime."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def task_error_to_proto(error: TaskError) -> common_pb2.TaskError:
    """The ``TaskError`` of a :class:`TaskError`."""
    message = common_pb2.TaskError(
        message=error.message,
        error_type=error.error_type,
        checkpoint_id=error.checkpoint_id,
        executor_id=error.executor_id,
        executor_generation=error.executor_generation,
        task_generation=error.task_generation,
        time=timestamp_to_proto(error.time),
    )
    if error.record is not None:
        message.record.CopyFrom(
            common_pb2.RecordLocation(
                topic=error.record.topic,
                partition=error.record.partition,
                offset=error.record.offset,
            )
        )
    return message


def task_view_to_proto(view: TaskView) -> common_pb2.TaskStatus:
    """The ``TaskStatus`` of a :class:`TaskView`."""
    status = common_pb2.TaskStatus(
        task_id=task_ref_to_proto(view.task),
        task_generation=view.generation,
        state=_PHASE_TO_PROTO[view.phase],
        last_precommitted_checkpoint_id=view.last_precommitted_checkpoint_id,
        in_flight_checkpoint_ids=list(view.in_flight_checkpoint_ids),
        state_change_time=timestamp_to_proto(view.state_change_time),
    )
    if view.last_error is not None:
        status.last_error.CopyFrom(task_error_to_proto(view.last_error))
    return status


# -- assignments (RegisterExecutor and Heartbeat answers) -------------------------------


def restore_from_proto(restore: coordinator_pb2.TaskRestoreState) -> RestorePlan:
    """A ``TaskRestoreState`` as a :class:`RestorePlan`.

    A handle this executor cannot read does not fail the heartbeat that carried it: the
    plan keeps the error and the task's restore fails with it.
    """
    try:
        return RestorePlan(
            commits=tuple(
                (
                    entry.checkpoint_id,
                    handles_from_proto(
                        entry.handles, field_name=f"commit_before_start[{i}].handles"
                    ),
                )
                for i, entry in enumerate(restore.commit_before_start)
            ),
            aborts=handles_from_proto(restore.abort_before_start, field_name="abort_before_start"),
        )
    except InvalidArgument as exc:
        return RestorePlan(invalid=exc)


def _is_running_target(target: common_pb2.TargetState.ValueType) -> bool:
    return target in (common_pb2.TARGET_STATE_RUNNING, common_pb2.TARGET_STATE_UNSPECIFIED)


def assignment_from_proto(assignment: coordinator_pb2.TaskAssignment) -> Assignment:
    """A ``TaskAssignment`` as an :class:`Assignment`."""
    spec = assignment.pipeline_spec
    try:
        parsed, invalid = spec_from_proto(spec), None
    except InvalidArgument as exc:
        parsed, invalid = None, exc
    return Assignment(
        task=TaskRef(assignment.task_id.pipeline_name, assignment.task_id.task_index),
        generation=Generation(assignment.task_generation),
        config_version=assignment.config_version,
        spec=parsed,
        invalid_spec=invalid,
        source_partitions=tuple((tp.topic, tp.partition) for tp in assignment.source_partitions),
        restore_offsets={
            (po.topic, po.partition): po.offset for po in assignment.restore.start_offsets
        },
        target_running=_is_running_target(assignment.target_state),
        max_records_per_partition=parsed.source.max_records_per_partition if parsed else 0,
        transaction_timeout_ms=parsed.sink.transaction_timeout_ms if parsed else 0,
        restore=restore_from_proto(assignment.restore),
    )


def register_reply_from_proto(
    response: coordinator_pb2.RegisterExecutorResponse,
) -> MembershipReply:
    """A ``RegisterExecutorResponse`` as a :class:`MembershipReply`."""
    return MembershipReply(
        leader=leader_from_proto(response.leader_epoch),
        heartbeat_interval_ms=response.heartbeat_interval_ms,
        session_timeout_ms=response.session_timeout_ms,
        assignments=tuple(assignment_from_proto(a) for a in response.assignments),
        assignment_version=response.assignment_version,
        executor_generation=Generation(response.executor_generation),
        session_id=response.session_id,
    )


def heartbeat_reply_from_proto(response: coordinator_pb2.HeartbeatResponse) -> MembershipReply:
    """A ``HeartbeatResponse`` as a :class:`MembershipReply`."""
    return MembershipReply(
        leader=leader_from_proto(response.leader_epoch),
        heartbeat_interval_ms=response.heartbeat_interval_ms,
        session_timeout_ms=response.session_timeout_ms,
        assignments=tuple(assignment_from_proto(a) for a in response.assignments),
        assignment_version=response.assignment_version,
        assignment_unchanged=response.assignment_unchanged,
    )


# -- reports ----------------------------------------------------------------------------


def _stamp_fields(stamp: ReportStamp) -> dict[str, Any]:
    return {
        "request_id": stamp.request_id,
        "leader_epoch": leader_to_proto(stamp.leader),
        "checkpoint_id": stamp.checkpoint_id,
        "task_id": task_ref_to_proto(stamp.task),
        "task_generation": stamp.task_generation,
        "executor_id": stamp.executor_id,
        "executor_generation": stamp.executor_generation,
    }


def precommit_report_to_proto(report: PrecommitReport) -> coordinator_pb2.ReportPrecommitRequest:
    """The ``ReportPrecommitRequest`` of a :class:`PrecommitReport`."""
    output = report.output
    return coordinator_pb2.ReportPrecommitRequest(
        **_stamp_fields(report.stamp),
        source_ranges=[offset_range_to_proto(r) for r in output.ranges],
        sink_handles=[handle_to_proto(h) for h in output.handles],
        counts=common_pb2.RecordCounts(
            records_read=output.records_read,
            records_written=output.records_written,
            records_dead_lettered=output.records_dead_lettered,
        ),
        precommit_duration_ms=report.precommit_duration_ms,
        backlog_left=report.backlog_left,
    )


def precommit_answer_from_proto(
    response: coordinator_pb2.ReportPrecommitResponse,
) -> PrecommitAnswer:
    """A ``ReportPrecommitResponse`` as a :class:`PrecommitAnswer`."""
    name = common_pb2.CheckpointState.Name(response.checkpoint_state)
    return PrecommitAnswer(checkpoint_state=name.removeprefix("CHECKPOINT_STATE_"))


def precommit_batch_to_proto(
    reports: Sequence[PrecommitReport],
) -> coordinator_pb2.ReportPrecommitsRequest:
    """The ``ReportPrecommitsRequest`` of this executor's :class:`PrecommitReport` s."""
    return coordinator_pb2.ReportPrecommitsRequest(
        request_id=str(uuid.uuid4()),
        executor_id=reports[0].stamp.executor_id if reports else "",
        reports=[precommit_report_to_proto(r) for r in reports],
    )


def precommit_result_from_proto(result: coordinator_pb2.ReportPrecommitResult) -> PrecommitAnswer:
    """An accepted report's ``ReportPrecommitResult`` as a :class:`PrecommitAnswer`."""
    name = common_pb2.CheckpointState.Name(result.checkpoint_state)
    return PrecommitAnswer(checkpoint_state=name.removeprefix("CHECKPOINT_STATE_"))


def checkpoint_failure_report_to_proto(
    report: CheckpointFailureReport,
) -> coordinator_pb2.ReportCheckpointFailureRequest:
    """The ``ReportCheckpointFailureRequest`` of a :class:`CheckpointFailureReport`."""
    return coordinator_pb2.ReportCheckpointFailureRequest(
        **_stamp_fields(report.stamp),
        error=task_error_to_proto(report.error),
        task_failed=report.task_failed,
    )


def task_failure_report_to_proto(
    report: TaskFailureReport,
) -> coordinator_pb2.ReportTaskFailureRequest:
    """The ``ReportTaskFailureRequest`` of a :class:`TaskFailureReport`."""
    return coordinator_pb2.ReportTaskFailureRequest(
        request_id=report.request_id,
        task_id=task_ref_to_proto(report.task),
        task_generation=report.task_generation,
        executor_id=report.executor_id,
        executor_generation=report.executor_generation,
        error=task_error_to_proto(report.error),
    )


__all__ = [
    "VERDICT_TO_PROTO",
    "assignment_from_proto",
    "checkpoint_failure_report_to_proto",
    "handles_from_proto",
    "heartbeat_reply_from_proto",
    "leader_from_proto",
    "leader_to_proto",
    "precommit_answer_from_proto",
    "precommit_report_to_proto",
    "register_reply_from_proto",
    "restore_from_proto",
    "task_error_to_proto",
    "task_failure_report_to_proto",
    "task_ref_to_proto",
    "task_view_to_proto",
    "timestamp_to_proto",
]
