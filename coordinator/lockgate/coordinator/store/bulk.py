"""Many rows written in one statement: inserts, upserts and keyed updates.

A trigger, a report batch and a COMPLETE each write a row per task (a 100-task checkpoint,
five tables of 100 rows). On PostgreSQL each of these is one statement whose rows come
from `unnest` over one array parameter per column: psycopg binds a parameter at a time in
Python, so a VALUES list or an executemany of 100 rows bound 300-700 parameters one by
one, and cost 4-5 ms of the leader's CPU a table, against about 1 ms for the arrays (and
0.5 ms for an update), measured with psycopg 3.3 (README, issue 14). On SQLite, whose
driver loops over an executemany in C, each is an executemany of one statement, its rows
handed to the driver as tuples (`_positional`).

Each statement is built once per table and column set (building one, an ON CONFLICT
clause included, cost about twice executing it). Every row of a call names the same
columns. Rows of an upsert or an update that share a key are written as an executemany
would write them, the last one winning: only the last is sent (PostgreSQL refuses an
upsert that meets a key twice in one statement, and an update would pick one at random).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from lockgate.coordinator.store.engine import db_now_ms

Rows = Sequence[Mapping[str, Any]]


def insert_rows(conn: Connection, table: sa.Table, rows: Rows) -> None:
    """Insert `rows` into `table` in one statement."""
    if not rows:
        return
    columns = tuple(rows[0])
    _run(conn, _insert_statement(conn.dialect.name, table, columns), columns, rows)


def upsert(
    conn: Connection,
    table: sa.Table,
    rows: Rows,
    *,
    key: Sequence[str],
    stamp: str = "updated_at_ms",
) -> None:
    """Insert `rows`, or update those whose `key` exists, in one statement; the `stamp`
    column is set from the database's clock."""
    if not rows:
        return
    columns = tuple(rows[0])
    statement = _upsert_statement(conn.dialect.name, table, columns, tuple(key), stamp)
    _run(conn, statement, columns, _last_per_key(rows, key))


def update_rows(
    conn: Connection,
    table: sa.Table,
    rows: Rows,
    *,
    key: Sequence[str],
    stamp: str,
) -> None:
    """Update the row of `table` each of `rows` names by its `key` columns: its other
    columns set to the row's values, and `stamp` to the database's clock, in one
    statement. A key no row has changes nothing."""
    if not rows:
        return
    columns = tuple(rows[0])
    statement = _update_statement(conn.dialect.name, table, columns, tuple(key), stamp)
    _run(conn, statement, columns, _last_per_key(rows, key))


def _last_per_key(rows: Rows, key: Sequence[str]) -> Rows:
    last = dict(zip(_values(rows, key), rows, strict=True))
    return rows if len(last) == len(rows) else list(last.values())


def _run(conn: Connection, statement: sa.Executable, columns: Sequence[str], rows: Rows) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(statement, array_params(columns, _values(rows, columns)))
        return
    positional = _positional(statement, conn.dialect)
    if positional is None:
        params = [_param(c) for c in columns]
        conn.execute(statement, [dict(zip(params, v, strict=True)) for v in _values(rows, columns)])
        return
    sql, order = positional
    conn.exec_driver_sql(sql, _values(rows, order))


def _values(rows: Rows, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's values of `columns`, in their order, taken by a getter in C: 43 us for
    430 rows of 7 columns, against 200 us for a generator per row (timeit, this machine)."""
    if len(columns) == 1:
        (column,) = columns
        return [(r[column],) for r in rows]
    get = operator.itemgetter(*columns)
    return [get(r) for r in rows]


@functools.lru_cache(maxsize=64)
def _positional(statement: sa.Executable, dialect: Dialect) -> tuple[str, tuple[str, ...]] | None:
    """An executemany's SQL as the driver takes it, and the column of each of its
    positional parameters, in order; None if a parameter needs converting on its way to
    the driver, or the driver's parameters are named (then SQLAlchemy binds them).
    SQLAlchemy binds every row of an executemany in Python (`construct_params`), which
    was about 8% of the leader's CPU in the round-trip bench on SQLite; the driver loops
    over tuples in C."""
    if not isinstance(statement, sa.ClauseElement):
        return None
    compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler):
        return None
    names = compiled.positiontup
    if not names or any(
        not name.startswith(_PREFIX)
        or bind.type.dialect_impl(dialect).bind_processor(dialect) is not None
        for name, bind in ((n, compiled.binds[n]) for n in names)
    ):
        return None
    return compiled.string, tuple(name.removeprefix(_PREFIX) for name in names)


def array_params(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, list[Any]]:
    """The parameters of an `unnested` source of `columns` holding `rows` (each a value
    per column, in their order)."""
    return {_param(c): [r[i] for r in rows] for i, c in enumerate(columns)}


_PREFIX = "bulk_"


def _param(column: str) -> str:
    # Not a column's own name: SQLAlchemy reserves those for the SET clause's values.
    return f"{_PREFIX}{column}"


def _source(dialect: str, table: sa.Table, columns: Sequence[str]) -> dict[str, Any]:
    """Each column's value in the statement: on PostgreSQL a column of `unnested`,
    elsewhere a parameter of the executemany."""
    if dialect != "postgresql":
        return {c: sa.bindparam(_param(c), type_=table.c[c].type) for c in columns}
    return unnested(table, columns)


def unnested(table: sa.Table, columns: Sequence[str]) -> dict[str, Any]:
    """PostgreSQL only: rows as a FROM clause, `unnest` over one array parameter per
    column (typed as `table`'s column; `array_params` gives their values), by column."""
    arrays = [
        sa.cast(
            sa.bindparam(_param(c), type_=pg_dialect.ARRAY(table.c[c].type)),
            pg_dialect.ARRAY(table.c[c].type),
        )
        for c in columns
    ]
    unnested = sa.func.unnest(*arrays).table_valued(*columns).render_derived(name="bulk")
    return {c: unnested.c[c] for c in columns}


@functools.lru_cache(maxsize=64)
def _insert_statement(dialect: str, table: sa.Table, columns: tuple[str, ...]) -> sa.Executable:
    source = _source(dialect, table, columns)
    if dialect != "postgresql":
        return table.insert().values(source)
    return table.insert().from_select(columns, sa.select(*source.values()))


@functools.lru_cache(maxsize=64)
def _upsert_statement(
    dialect: str, table: sa.Table, columns: tuple[str, ...], key: tuple[str, ...], stamp: str
) -> sa.Executable:
    source = _source(dialect, table, columns)
    insert: pg_dialect.Insert | sqlite_dialect.Insert
    if dialect == "postgresql":
        insert = pg_dialect.insert(table).from_select(
            (*columns, stamp), sa.select(*source.values(), db_now_ms())
        )
    else:
        insert = sqlite_dialect.insert(table).values({**source, stamp: db_now_ms()})
    update = {**{c: insert.excluded[c] for c in columns if c not in key}, stamp: db_now_ms()}
    return insert.on_conflict_do_update(index_elements=list(key), set_=update)


@functools.lru_cache(maxsize=64)
def _update_statement(
    dialect: str, table: sa.Table, columns: tuple[str, ...], key: tuple[str, ...], stamp: str
) -> sa.Executable:
    source = _source(dialect, table, columns)
    return (
        table.update()
        .where(*(table.c[k] == source[k] for k in key))
        .values({**{c: source[c] for c in columns if c not in key}, stamp: db_now_ms()})
    )


__all__ = ["Rows", "array_params", "insert_rows", "unnested", "update_rows", "upsert"]
