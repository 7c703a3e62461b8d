"""Typed identifiers of Lockgate's protocol, shared by every service.

They are `NewType`s so mypy refuses, say, a task id where a pipeline id is expected,
while at run time they stay plain `str`/`int` values that cross SQL and gRPC unchanged.
"""

from __future__ import annotations

import re
from typing import NewType

PipelineId = NewType("PipelineId", str)
"""A pipeline's name, unique in the cluster (as a Kafka Connect connector name)."""

TaskId = NewType("TaskId", str)
"""`<pipeline>/<index>`: one slice of a pipeline's source partitions."""

ExecutorId = NewType("ExecutorId", str)
"""An executor worker's configured id."""

CoordinatorId = NewType("CoordinatorId", str)
"""A coordinator replica's configured id (`--id`)."""

CheckpointId = NewType("CheckpointId", int)
"""Checkpoint number `N = 1, 2, ...`, counted per pipeline."""

LeaderEpoch = NewType("LeaderEpoch", int)
"""The fencing token: grows by one on every change of leader."""

Generation = NewType("Generation", int)
"""A session counter (executor registration, task assignment); stale ones are refused."""

TransactionalId = NewType("TransactionalId", str)
"""A Kafka producer's `transactional.id`: `<task slot id>-<write partition>` for a sink."""

PIPELINE_ID_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
"""Pipeline names end up inside Kafka `transactional.id`s and URLs, so they stay plain."""


def task_id(pipeline_id: PipelineId, task_index: int) -> TaskId:
    """Return the id of task number `task_index` of `pipeline_id`."""
    return TaskId(f"{pipeline_id}/{task_index}")


def split_task_id(task: TaskId) -> tuple[PipelineId, int]:
    """Return `(pipeline_id, task_index)` of a task id; ValueError if it is malformed."""
    pipeline, sep, index = task.rpartition("/")
    if not sep or not pipeline or not index.isdigit():
        raise ValueError(f"malformed task id {task!r}: expected '<pipeline>/<index>'")
    return PipelineId(pipeline), int(index)
