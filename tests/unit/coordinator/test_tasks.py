"""Splitting source partitions into tasks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.limits import MAX_TASK_PARTITIONS
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.tasks import check_partitions_per_task, split_partitions

partitions = st.sets(
    st.builds(TopicPartition, st.sampled_from(["a", "b", "c"]), st.integers(0, 30)), max_size=60
)


@given(partitions, st.integers(1, 12), st.randoms())
def test_split_properties(parts: set[TopicPartition], tasks_max: int, rnd: random.Random) -> None:
    splits = split_partitions(parts, tasks_max)
    assert len(splits) == min(tasks_max, len(parts))
    assert [s.index for s in splits] == list(range(len(splits)))
    # Every partition in exactly one task, whole.
    flat = [tp for s in splits for tp in s.partitions]
    assert sorted(flat) == sorted(parts)
    assert len(flat) == len(set(flat))
    # Balanced.
    if splits:
        sizes = [len(s.partitions) for s in splits]
        assert max(sizes) - min(sizes) <= 1
        assert min(sizes) >= 1
    # Deterministic whatever the input order.
    shuffled = list(parts)
    rnd.shuffle(shuffled)
    assert split_partitions(shuffled, tasks_max) == splits


def test_contiguous_groups_like_kafka_connect() -> None:
    parts = [TopicPartition("t", p) for p in range(5)]
    splits = split_partitions(parts, 2)
    assert [[tp.partition for tp in s.partitions] for s in splits] == [[0, 1, 2], [3, 4]]


def test_bad_tasks_max() -> None:
    with pytest.raises(ValueError, match="tasks_max"):
        split_partitions([TopicPartition("t", 0)], 0)


def test_a_task_may_read_at_most_the_partitions_one_report_may_list() -> None:
    check_partitions_per_task(MAX_TASK_PARTITIONS, 1)
    check_partitions_per_task(3 * MAX_TASK_PARTITIONS, 3)
    check_partitions_per_task(0, 1)
    with pytest.raises(InvalidArgument) as refused:
        check_partitions_per_task(2 * MAX_TASK_PARTITIONS + 1, 2)
    (violation,) = refused.value.violations
    assert violation.field == "tasks_max"
    assert "set tasks_max to 3 or more" in violation.description
