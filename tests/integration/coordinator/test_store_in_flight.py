# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The leader's in-flight checkpoints (`store/in_flight.py`), on SQLite and PostgreSQL: a
report batch checks reports against the trigger rows and pre-commits the leader kept
instead of reading them back, and never where they could differ from the database's: after
another leader's term, after a transaction that failed, or for a recreated pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from lockgate.common.model.ids import PipelineId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.tables import precommit_offsets
from tests.integration.coordinator.test_store import (
    lead,
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
)
from tests.integration.coordinator.test_store_precommit_batch import PID, genuine_reports


def stored_ranges(store: SqlStore) -> list[tuple[str, int, str, int, int]]:
    """Every pre-committed range: checkpoint, task, partition, end."""
    with store.engine.connect() as conn:
        return [
            (r.pipeline_id, int(r.checkpoint_id), r.task_id, int(r.partition), int(r.end_offset))
            for r in conn.execute(
                sa.select(precommit_offsets).order_by(
                    precommit_offsets.c.task_id, precommit_offsets.c.partition
                )
            )
        ]


def record(store: SqlStore, fence: Any, reports: list[Precommit]) -> list[CheckpointState]:
    """The reports as one batch; each answer's state (a refusal fails the test)."""
    answers = store.checkpoints.record_precommit_batch(fence=fence, precommits=reports)
    assert all(isinstance(a, CheckpointRecord) for a in answers), answers
    return [a.state for a in answers if isinstance(a, CheckpointRecord)]


def test_a_report_recorded_in_another_leaders_term_is_a_retry_when_the_first_leads_again(
    open_stores: Callable[..., SqlStore],
) -> None:
    """c1 triggers checkpoint 1 and keeps it; c2 leads next and records task 0's report;
    c1 leads again and gets the same report (the executor retried it). c1's copy from its
    first term does not have the pre-commit: used, it would store the report a second time
    (a duplicate key, the batch failing on every retry). A new term reads the database."""
    c1_store, c2_store = open_stores(), open_stores()
    # Each term ends when the test says (a lease short enough to expire by itself ran out
    # during the setup's writes on a loaded machine).
    first = lead(c1_store, "c1")
    t0_report, t1_report = genuine_reports(c1_store, first)
    c1_store.lease.release_lease(fence=first)
    second = lead(c2_store, "c2")
    assert record(c2_store, second, [t0_report]) == [CheckpointState.TRIGGERED]
    before = stored_ranges(c2_store)
    c2_store.lease.release_lease(fence=second)
    third = lead(c1_store, "c1")
    assert third.leader_epoch == first.leader_epoch + 2

    assert record(c1_store, third, [t0_report]) == [CheckpointState.TRIGGERED]
    assert stored_ranges(c1_store) == before, "the retry stored nothing"
    assert record(c1_store, third, [t1_report]) == [CheckpointState.COMPLETE]


class _CommitRefused(Exception):
    """The database refused the transaction's commit (raised from its commit event)."""


def test_a_batch_whose_commit_failed_is_stored_when_retried(
    open_stores: Callable[..., SqlStore],
) -> None:
    """Task 0's report is checked and written, and the commit fails: nothing is stored.
    What the leader keeps must not say task 0 pre-committed (it would answer the retry as
    already stored, and checkpoint 1 would wait for it until it timed out)."""
    store = open_stores()
    fence = lead(store)
    t0_report, t1_report = genuine_reports(store, fence)
    refusals = []

    def refuse_once(_conn: Any) -> None:
        if not refusals:
            refusals.append(True)
            raise _CommitRefused("commit refused")

    sa.event.listen(store.engine, "commit", refuse_once)
    try:
        with pytest.raises(_CommitRefused):
            store.checkpoints.record_precommit_batch(fence=fence, precommits=[t0_report])
    finally:
        sa.event.remove(store.engine, "commit", refuse_once)
    assert stored_ranges(store) == []

    assert record(store, fence, [t0_report]) == [CheckpointState.TRIGGERED]
    assert [task for _, _, task, _, _ in stored_ranges(store)] == [t0_report.task_id]
    assert record(store, fence, [t1_report]) == [CheckpointState.COMPLETE]


def test_a_recreated_pipelines_checkpoint_is_checked_against_its_own_trigger(
    open_stores: Callable[..., SqlStore],
) -> None:
    """Pipeline p's checkpoint 1 has task 0's pre-commit when p is deleted; recreated, p
    starts again at checkpoint 1. Its trigger replaces what the leader kept of the old
    one: task 0's report of the new checkpoint 1 is stored, not taken for a retry, and
    the checkpoint completes."""
    store = open_stores()
    fence = lead(store)
    old_t0, _ = genuine_reports(store, fence)
    assert record(store, fence, [old_t0]) == [CheckpointState.TRIGGERED]
    store.pipelines.delete_pipeline(fence=fence, pipeline_id=PID)
    assert stored_ranges(store) == []

    # Recreated the same way, the executors registered again: their new generations.
    t0_report, t1_report = (
        dataclasses.replace(
            r,
            executor_generation=store.executors.get_executor(executor_id=r.executor_id).generation,
        )
        for r in genuine_reports(store, fence)
    )
    assert record(store, fence, [t0_report]) == [CheckpointState.TRIGGERED]
    assert [task for _, _, task, _, _ in stored_ranges(store)] == [t0_report.task_id]
    assert record(store, fence, [t1_report]) == [CheckpointState.COMPLETE]
    assert store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId("p"), checkpoint_id=t1_report.checkpoint_id
    ).precommitted == {t0_report.task_id, t1_report.task_id}
