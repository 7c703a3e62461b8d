# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The rate's read (`ProgressStore.committed_progress`), on SQLite and PostgreSQL: the newest
COMMITTED checkpoints of one pipeline, newest first, each with the records its pre-commits
read, and nothing of another pipeline's checkpoints of the same numbers."""

from __future__ import annotations

from collections.abc import Callable

from lockgate.common.model.ids import PipelineId
from lockgate.coordinator.store import SqlStore
from tests.integration.coordinator.test_store import (
    commit,
    lead,
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
    trigger,
)
from tests.integration.coordinator.test_store_checkpoints import precommit, running_pipeline


def test_the_newest_commits_each_with_the_records_its_precommits_read(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    # Two pipelines with the same checkpoint numbers, one after the other (the second's
    # assignment takes the executors): each task reads two partitions.
    sizes = {"p": (1, 2, 3, 4), "q": (100, 200, 300, 400)}
    for name in sizes:
        task_ids = running_pipeline(store, fence, name)
        pid, start = PipelineId(name), 0
        for n, size in enumerate(sizes[name], start=1):
            trigger(store, fence=fence, pipeline_id=pid)
            for task in task_ids:
                precommit(store, fence, n, task, start=start, end=start + size, pipeline=name)
            start += size
            if n < len(sizes[name]):  # the last one stays COMPLETE, not committed
                commit(store, fence=fence, pipeline_id=pid, checkpoint_id=n)  # type: ignore[arg-type]

    newest, now_ms = store.progress.committed_progress(pipeline_id=PipelineId("p"), limit=2)
    # Checkpoints 3 and 2 of p: 2 tasks x 2 partitions x their range's size.
    assert [c.records_read for c in newest] == [4 * 3, 4 * 2]
    assert newest[0].committed_at_ms >= newest[1].committed_at_ms
    assert all(c.triggered_at_ms <= c.committed_at_ms <= now_ms for c in newest)

    every, _ = store.progress.committed_progress(pipeline_id=PipelineId("q"), limit=10)
    assert [c.records_read for c in every] == [4 * 300, 4 * 200, 4 * 100]
    none, _ = store.progress.committed_progress(pipeline_id=PipelineId("nope"), limit=10)
    assert none == []
