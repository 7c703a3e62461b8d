"""Splitting a pipeline into tasks over its source partitions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockgate.common.model.limits import MAX_TASK_PARTITIONS
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.errors import InvalidArgument


@dataclass(frozen=True)
class TaskSplit:
    """Task number `index` of a pipeline and the source partitions it alone reads."""

    index: int
    partitions: tuple[TopicPartition, ...]


def split_partitions(partitions: Iterable[TopicPartition], tasks_max: int) -> list[TaskSplit]:
    """Split source partitions into at most `tasks_max` tasks, deterministically.

    Every partition goes to exactly one task, whole: Kafka keeps per-key order only if
    every record of a key passes through one producer in source order (DESIGN.md), so a
    partition's range is never shared between tasks. Partitions are sorted and cut into
    contiguous groups whose sizes differ by at most one, as Kafka Connect's
    `ConnectorUtils.groupPartitions` does; the same input always gives the same tasks.
    No partitions give no tasks.
    """
    if tasks_max < 1:
        raise ValueError(f"tasks_max must be >= 1, got {tasks_max}")
    ordered = sorted(set(partitions))
    if not ordered:
        return []
    count = min(tasks_max, len(ordered))
    base, extra = divmod(len(ordered), count)
    splits: list[TaskSplit] = []
    start = 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        splits.append(TaskSplit(index=index, partitions=tuple(ordered[start : start + size])))
        start += size
    return splits


def check_partitions_per_task(partition_count: int, tasks_max: int) -> None:
    """InvalidArgument on `tasks_max` if `split_partitions` would give a task more than
    `MAX_TASK_PARTITIONS` partitions: its pre-commit report could never be accepted."""
    largest = -(-partition_count // max(1, tasks_max))
    if largest > MAX_TASK_PARTITIONS:
        needed = -(-partition_count // MAX_TASK_PARTITIONS)
        raise InvalidArgument.for_field(
            "tasks_max",
            f"the source topics have {partition_count} partitions: with tasks_max {tasks_max} a "
            f"task would read {largest}, more than the limit of {MAX_TASK_PARTITIONS} per task; "
            f"set tasks_max to {needed} or more",
        )
