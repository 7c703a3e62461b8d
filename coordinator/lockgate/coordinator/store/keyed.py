"""Statements over many checkpoints named by key, (pipeline_id, checkpoint_id), built once.

A report batch at scale names checkpoints of many pipelines (issue 14), and its reads and
writes select exactly those: one primary-key lookup per key, OR-ed (SQLite scans the
table for a row-value IN, and a pipeline IN crossed with a checkpoint IN reads every
pair). Building such a statement per call, its comparisons and their cache key, cost more
than running it: so each statement is built once per size, with bound parameters for the
keys, and a call binds its keys, padding the last chunk by repeating its last key (a
repeated OR term selects nothing twice). Sizes are powers of two up to `CHUNK`, so a
handful of statements serve every batch, and no OR is deeper than SQLite's expression
depth limit.

On PostgreSQL the keys are one array parameter per key column instead, a row-value IN
over their `unnest` (`bulk.py`): one statement for any number of keys, and three
parameters bound where a 100-task report's task rows bound 300 one at a time (1.7 ms of
the leader's CPU a read, most of it psycopg binding them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult, Row

from lockgate.common.model.ids import TaskId
from lockgate.coordinator.domain.precommits import CheckpointKey
from lockgate.coordinator.store.bulk import array_params, unnested

AnyRow = Row[*tuple[Any, ...]]
# A statement over the rows the filter selects (module-level functions: cached by identity).
Build = Callable[[sa.ColumnElement[bool]], sa.Executable]

CHUNK = 64
T = TypeVar("T")


def execute_keyed(
    conn: Connection,
    build: Build,
    table: sa.Table,
    keys: Sequence[CheckpointKey],
    *,
    task_ids: Mapping[CheckpointKey, AbstractSet[TaskId]] | None = None,
) -> list[AnyRow]:
    """The rows `build` returns over `table`'s rows of these checkpoints (with `task_ids`,
    only those tasks' rows of each: a table keyed by task too; none for a write without
    RETURNING), run a chunk at a time."""
    named: list[tuple[Any, ...]] = sorted(set(keys))
    if task_ids is not None:
        named = [(*key, task) for key in named for task in sorted(task_ids[key])]
    if conn.dialect.name == "postgresql":
        columns = _KEY_COLUMNS[: 3 if task_ids is not None else 2]
        statement = _unnested_statement(build, table, task_ids is not None)
        return _rows(conn.execute(statement, array_params(columns, named))) if named else []
    rows: list[AnyRow] = []
    for padded in padded_chunks(named):
        values = {f"key_{i}_{j}": v for i, key in enumerate(padded) for j, v in enumerate(key)}
        statement = _statement(build, table, len(padded), task_ids is not None)
        rows.extend(_rows(conn.execute(statement, values)))
    return rows


def padded_chunks(named: Sequence[T]) -> Iterator[list[T]]:
    """`named` (not empty) at most `CHUNK` at a time, each chunk padded to a power of two
    by repeating its last item: the sizes of the statements built once (see the module
    docstring). A caller that reads a row per item skips the padding's."""
    for start in range(0, len(named), CHUNK):
        chunk = list(named[start : start + CHUNK])
        size = 1 << (len(chunk) - 1).bit_length()
        yield chunk + [chunk[-1]] * (size - len(chunk))


def _rows(result: CursorResult[Any]) -> list[AnyRow]:
    """A statement's rows; none for a write without RETURNING."""
    return list(result) if result.returns_rows else []


_KEY_COLUMNS = ("pipeline_id", "checkpoint_id", "task_id")


@functools.lru_cache(maxsize=256)
def _unnested_statement(build: Build, table: sa.Table, by_task: bool) -> sa.Executable:
    columns = _KEY_COLUMNS[: 3 if by_task else 2]
    keys = unnested(table, columns)
    return build(
        sa.tuple_(*(table.c[c] for c in columns)).in_(sa.select(*(keys[c] for c in columns)))
    )


@functools.lru_cache(maxsize=256)
def _statement(build: Build, table: sa.Table, size: int, by_task: bool) -> sa.Executable:
    return build(_keys_filter(table, size, by_task))


def _keys_filter(table: sa.Table, size: int, by_task: bool) -> sa.ColumnElement[bool]:
    """`size` keys' rows, each an index lookup: (pipeline_id, checkpoint_id[, task_id])."""
    columns = [table.c.pipeline_id, table.c.checkpoint_id]
    if by_task:
        columns.append(table.c.task_id)
    return sa.or_(
        *(
            sa.and_(*(c == sa.bindparam(f"key_{i}_{j}") for j, c in enumerate(columns)))
            for i in range(size)
        )
    )


__all__ = ["CHUNK", "Build", "execute_keyed", "padded_chunks"]
