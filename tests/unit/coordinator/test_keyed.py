"""Statements over many checkpoints named by key (`store/keyed.py`), on an in-memory SQLite:
exactly the named rows, however many keys and chunks, from a few statements built once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.coordinator.store import keyed
from lockgate.coordinator.store.keyed import CHUNK, execute_keyed
from lockgate.coordinator.store.tables import checkpoint_tasks, checkpoints, metadata

PIPELINES = [PipelineId(f"p{n}") for n in range(3)]


@pytest.fixture
def conn() -> Iterator[Connection]:
    """Three pipelines of 100 checkpoints, each with tasks t0 and t1."""
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.begin() as c:
        c.execute(
            checkpoints.insert(),
            [
                {
                    "pipeline_id": p,
                    "checkpoint_id": n,
                    "state": "COMMITTED",
                    "leader_epoch": 1,
                    "triggered_at_ms": 0,
                }
                for p in PIPELINES
                for n in range(1, 101)
            ],
        )
        c.execute(
            checkpoint_tasks.insert(),
            [
                {
                    "pipeline_id": p,
                    "checkpoint_id": n,
                    "task_id": f"{p}-{t}",
                    "task_generation": 1,
                    "slot": 0,
                    "transactional_id": f"{p}-{t}-{n}",
                }
                for p in PIPELINES
                for n in range(1, 101)
                for t in range(2)
            ],
        )
    with engine.connect() as c:
        yield c


def select_checkpoints(keys: sa.ColumnElement[bool]) -> sa.Executable:
    return sa.select(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id).where(keys)


def select_tasks(keys: sa.ColumnElement[bool]) -> sa.Executable:
    return sa.select(
        checkpoint_tasks.c.pipeline_id, checkpoint_tasks.c.checkpoint_id, checkpoint_tasks.c.task_id
    ).where(keys)


def test_more_keys_than_a_chunk_read_exactly_the_named_rows(conn: Connection) -> None:
    """150 keys (three chunks, the last padded), some named twice, some of no row: each
    existing one's row once, and no row of a key not named (pipeline p1's checkpoint 7 is
    not read because p0's 7 is named)."""
    named = [(p, CheckpointId(n)) for p in PIPELINES[:2] for n in range(1, 200, 3)]
    named += named[:5]  # named twice
    rows = execute_keyed(conn, select_checkpoints, checkpoints, named)
    read = [(r.pipeline_id, r.checkpoint_id) for r in rows]
    assert len(set(named)) > 2 * CHUNK
    assert sorted(read) == sorted({k for k in named if k[1] <= 100})


def test_with_task_ids_only_those_tasks_rows_of_each_checkpoint(conn: Connection) -> None:
    p0, p1 = PIPELINES[:2]
    tasks = {
        (p0, CheckpointId(1)): {TaskId("p0-0")},
        (p0, CheckpointId(2)): {TaskId("p0-0"), TaskId("p0-1")},
        (p1, CheckpointId(1)): {TaskId("p1-1")},
    }
    rows = execute_keyed(conn, select_tasks, checkpoint_tasks, sorted(tasks), task_ids=tasks)
    assert sorted((r.pipeline_id, r.checkpoint_id, r.task_id) for r in rows) == [
        ("p0", 1, "p0-0"),
        ("p0", 2, "p0-0"),
        ("p0", 2, "p0-1"),
        ("p1", 1, "p1-1"),
    ]


def test_each_size_builds_its_statement_once_and_every_key_is_an_index_lookup(
    conn: Connection,
) -> None:
    """Key counts 1 to 200 need one statement per power of two up to the chunk size, each
    built once; SQLite looks each key up in the primary key rather than scanning."""
    keyed._statement.cache_clear()
    for count in range(1, 201):
        keys = [(PIPELINES[0], CheckpointId(n)) for n in range(1, count + 1)]
        execute_keyed(conn, select_checkpoints, checkpoints, keys)
    sizes = CHUNK.bit_length()  # 1, 2, 4, ..., CHUNK
    assert keyed._statement.cache_info().currsize == sizes

    statement = keyed._statement(select_checkpoints, checkpoints, 4, False)
    compiled = statement.compile(conn.engine)
    values = {name: "p0" if "pipeline" in name else 1 for name in compiled.params}
    plan = conn.exec_driver_sql(
        f"EXPLAIN QUERY PLAN {compiled}", tuple(values[n] for n in compiled.positiontup or ())
    ).all()
    details = [row[-1] for row in plan]
    assert not any(d.startswith("SCAN checkpoints") for d in details), details
    lookups = [d for d in details if d.startswith("SEARCH checkpoints USING")]
    assert len(lookups) == 4 and all("(pipeline_id=? AND checkpoint_id=?)" in d for d in lookups)
