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
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from lockgate.common.model.ids import TaskId
from lockgate.coordinator.domain.precommits import CheckpointKey

AnyRow = Row[*tuple[Any, ...]]
# A statement over the rows the filter selects (module-level functions: cached by identity).
Build = Callable[[sa.ColumnElement[bool]], sa.Executable]

CHUNK = 64


def execute_keyed(
    conn: Connection,
    build: Build,
    table: sa.Table,
    keys: Sequence[CheckpointKey],
    *,
    task_ids: Mapping[CheckpointKey, AbstractSet[TaskId]] | None = None,
) -> list[AnyRow]:
    """The rows `build` returns over `table`'s rows of these checkpoints (with `task_ids`,
    only those tasks' rows of each: a table keyed by task too), run a chunk at a time."""
    keys = sorted(set(keys))
    rows: list[AnyRow] = []
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start : start + CHUNK]
        size = 1 << (len(chunk) - 1).bit_length()
        padded = chunk + [chunk[-1]] * (size - len(chunk))
        values: dict[str, Any] = {}
        for i, (pipeline_id, checkpoint_id) in enumerate(padded):
            values[f"key_pipeline_{i}"] = pipeline_id
            values[f"key_checkpoint_{i}"] = checkpoint_id
            if task_ids is not None:
                values[f"key_tasks_{i}"] = sorted(task_ids[(pipeline_id, checkpoint_id)])
        rows.extend(conn.execute(_statement(build, table, size, task_ids is not None), values))
    return rows


@functools.lru_cache(maxsize=256)
def _statement(build: Build, table: sa.Table, size: int, by_task: bool) -> sa.Executable:
    return build(_keys_filter(table, size, by_task))


def _keys_filter(table: sa.Table, size: int, by_task: bool) -> sa.ColumnElement[bool]:
    """`size` keys' rows, each an index lookup: (pipeline_id, checkpoint_id[, task_id])."""
    terms = []
    for i in range(size):
        term = [
            table.c.pipeline_id == sa.bindparam(f"key_pipeline_{i}"),
            table.c.checkpoint_id == sa.bindparam(f"key_checkpoint_{i}"),
        ]
        if by_task:
            term.append(table.c.task_id.in_(sa.bindparam(f"key_tasks_{i}", expanding=True)))
        terms.append(sa.and_(*term))
    return sa.or_(*terms)


__all__ = ["CHUNK", "Build", "execute_keyed"]
