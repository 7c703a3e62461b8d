"""Splitting source partitions into tasks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.tasks import split_partitions

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
