"""A task sizes its checkpoints from what its last ones measured (`checkpoint_size.py`)."""

from __future__ import annotations

import time

from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import DEFAULT_MAX_RECORDS_PER_PARTITION
from lockgate.executor.dataplane.protocol import PrecommitOutput, PrecommitWork
from lockgate.executor.errors import SinkError
from lockgate.executor.runtime.checkpoint_size import (
    FIRST_LIMIT,
    FLOOR,
    TARGET_SHARE_OF_TIMEOUT,
    CheckpointSize,
)
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    WAIT_S,
    BlockingDataPlane,
    start_batch,
    start_worker,
    stop_worker,
    trigger,
)

TIMEOUT_S = 60.0
TARGET_S = TIMEOUT_S * TARGET_SHARE_OF_TIMEOUT


def ranges(*sizes: int) -> list[OffsetRange]:
    return [OffsetRange("in", p, 100, 100 + n) for p, n in enumerate(sizes)]


def test_a_first_checkpoint_reads_the_first_limit_or_the_ceiling_if_lower() -> None:
    assert CheckpointSize.first(1_000_000).limit == FIRST_LIMIT
    assert CheckpointSize.first(500).limit == 500
    assert CheckpointSize.first(0).limit == 0


def test_a_fast_checkpoint_that_read_to_its_limit_grows_the_next_up_to_the_ceiling() -> None:
    size = CheckpointSize.first(250_000)
    # 50,000 a partition in 1 s: 50,000 records/s, 300,000 in the target, above the ceiling.
    left = size.observe(
        limit=FIRST_LIMIT, ranges=ranges(FIRST_LIMIT, 10), seconds=1.0, timeout_s=TIMEOUT_S
    )
    assert left
    assert size.limit == 250_000
    size = CheckpointSize.first(10_000_000)
    size.observe(limit=FIRST_LIMIT, ranges=ranges(FIRST_LIMIT), seconds=2.0, timeout_s=TIMEOUT_S)
    assert size.limit == int(FIRST_LIMIT / 2.0 * TARGET_S)


def test_a_slow_checkpoint_shrinks_the_next_to_the_target_but_not_below_the_floor() -> None:
    size = CheckpointSize.first(250_000)
    # 50,000 a partition in 20 s, over the 6 s target: 2,500 records/s, 15,000 in the target.
    left = size.observe(
        limit=FIRST_LIMIT, ranges=ranges(FIRST_LIMIT), seconds=20.0, timeout_s=TIMEOUT_S
    )
    assert left
    assert size.limit == int(2_500 * TARGET_S)
    # Even a checkpoint that read less than its limit shrinks it when it was slow.
    size.observe(limit=size.limit, ranges=ranges(100), seconds=50.0, timeout_s=TIMEOUT_S)
    assert size.limit == FLOOR


def test_a_checkpoint_that_read_all_there_was_within_the_target_keeps_the_limit() -> None:
    size = CheckpointSize.first(250_000)
    left = size.observe(limit=FIRST_LIMIT, ranges=ranges(10, 0), seconds=0.2, timeout_s=TIMEOUT_S)
    assert not left
    assert size.limit == FIRST_LIMIT
    assert not size.observe(limit=FIRST_LIMIT, ranges=[], seconds=9.0, timeout_s=TIMEOUT_S)
    assert size.limit == FIRST_LIMIT


def test_a_failed_checkpoint_past_the_target_is_retried_smaller() -> None:
    size = CheckpointSize.first(250_000)
    size.failed(limit=FIRST_LIMIT, seconds=1.0, timeout_s=TIMEOUT_S)
    assert size.limit == FIRST_LIMIT
    size.failed(limit=FIRST_LIMIT, seconds=TIMEOUT_S, timeout_s=TIMEOUT_S)
    assert size.limit == int(FIRST_LIMIT * TARGET_SHARE_OF_TIMEOUT)


def test_without_a_ceiling_nothing_is_sized_and_nothing_is_left() -> None:
    size = CheckpointSize.first(0)
    assert not size.observe(limit=0, ranges=ranges(10**7), seconds=100.0, timeout_s=TIMEOUT_S)
    size.failed(limit=0, seconds=100.0, timeout_s=TIMEOUT_S)
    assert size.limit == 0


def test_a_ceiling_below_the_floor_bounds_the_floor_too() -> None:
    size = CheckpointSize.first(300)
    size.observe(limit=300, ranges=ranges(300), seconds=50.0, timeout_s=TIMEOUT_S)
    assert size.limit == 300


def test_a_task_reports_records_left_and_sizes_its_next_checkpoint() -> None:
    """Through the runtime: a batch that read to its limit says so in its report, and the
    task's next batch may read more (fast: up to the spec's ceiling); one that read less
    says nothing is left."""
    runtime, coordinator, data_plane = start_worker()
    try:
        data_plane.read_to_limit = True
        start_batch(runtime, data_plane, 1).set()
        wait_for("report 1", lambda: coordinator.precommits == [1], timeout_s=WAIT_S)
        data_plane.read_to_limit = False
        start_batch(runtime, data_plane, 2).set()
        wait_for("report 2", lambda: coordinator.precommits == [1, 2], timeout_s=WAIT_S)
        limits = [w.max_records_per_partition for w in data_plane.works]
        assert limits == [FIRST_LIMIT, DEFAULT_MAX_RECORDS_PER_PARTITION]
        assert coordinator.backlog_left == [True, False]
    finally:
        stop_worker(runtime, data_plane)


class _SteppedClock:
    """The monotonic clock plus what the test's batches add to it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class _SlowFailingFirst(BlockingDataPlane):
    """Checkpoint 1's batch takes `seconds` by the clock and fails; the rest block as
    `BlockingDataPlane`'s do."""

    def __init__(self, clock: _SteppedClock, seconds: float) -> None:
        super().__init__()
        self._clock = clock
        self._seconds = seconds

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        if work.checkpoint_id != 1:
            return super().run_precommit(work)
        self.works.append(work)
        self._clock.offset += self._seconds
        raise SinkError("checkpoint 1: the broker did not answer")


def test_a_task_whose_batch_failed_past_the_target_retries_smaller() -> None:
    """Through the runtime: a pre-commit that failed after more than a tenth of its
    timeout (0.5 s of 1 s) sizes the task's next checkpoint as if it had read its whole
    limit in that time: about a fifth of it."""
    clock = _SteppedClock()
    data_plane = _SlowFailingFirst(clock, seconds=0.5)
    runtime, _, _ = start_worker(data_plane=data_plane, clock=clock)
    try:
        trigger(runtime, 1, timeout_ms=1_000)
        wait_for(
            "checkpoint 1 to end",
            lambda: 1 not in runtime.statuses()[0].in_flight_checkpoint_ids,
            timeout_s=WAIT_S,
        )
        start_batch(runtime, data_plane, 2).set()
        first, second = (w.max_records_per_partition for w in data_plane.works)
        assert first == FIRST_LIMIT
        assert FLOOR <= second <= FIRST_LIMIT // 5, second
    finally:
        stop_worker(runtime, data_plane)
