# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The store's many-row statements (`store/bulk.py`, `store/keyed.py`) on SQLite and
PostgreSQL alike: one array parameter per column on PostgreSQL, an executemany on SQLite,
the same rows written and read either way."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.bulk import insert_rows, update_rows, upsert
from lockgate.coordinator.store.keyed import execute_keyed
from lockgate.coordinator.store.tables import coordinators
from tests.integration.coordinator.test_store import (
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
)

# A table of the test's own, keyed as the checkpoints' rows are, with none of their
# foreign keys: each helper's rows, NULLs and keys alone.
ROWS = sa.Table(
    "bulk_test_rows",
    sa.MetaData(),
    sa.Column("pipeline_id", sa.String(63), primary_key=True),
    sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
    sa.Column("task_id", sa.String(127), primary_key=True),
    sa.Column("start_offset", sa.BigInteger, nullable=True),
    sa.Column("end_offset", sa.BigInteger, nullable=False),
)


def row(pipeline_id: str, checkpoint_id: int, task: int) -> dict[str, object]:
    end = (checkpoint_id + 1) * 1_000 + task
    return {
        "pipeline_id": pipeline_id,
        "checkpoint_id": checkpoint_id,
        "task_id": f"{pipeline_id}-{task}",
        "start_offset": None if task % 7 == 0 else end - 10,  # NULLs among a column's values
        "end_offset": end,
    }


def test_many_rows_are_inserted_and_read_back_by_key(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    ROWS.create(store.engine)
    rows = [row(p, c, t) for p in ("p", "q") for c in range(3) for t in range(70)]
    with store.engine.begin() as conn:
        insert_rows(conn, ROWS, rows)
        insert_rows(conn, ROWS, [])  # nothing to write: no statement
    with store.engine.begin() as conn:
        stored = [dict(r) for r in conn.execute(sa.select(ROWS)).mappings()]
    assert sorted(stored, key=_key) == sorted(rows, key=_key)

    def read(
        keys: list[tuple[str, int]], tasks: dict[tuple[str, int], set[str]] | None
    ) -> list[tuple[str, ...]]:
        with store.engine.begin() as conn:
            found = execute_keyed(conn, _all_of, ROWS, keys, task_ids=tasks)  # type: ignore[arg-type]
        return sorted(_key(dict(r._mapping)) for r in found)

    keys = [("p", 0), ("p", 2), ("q", 1), ("q", 9), ("r", 0)]  # two name no row
    assert read(keys, None) == sorted(
        _key(r) for r in rows if (r["pipeline_id"], r["checkpoint_id"]) in keys
    )
    tasks = {k: {f"{k[0]}-{t}" for t in range(0, 80, 3)} for k in keys}
    assert read(keys, tasks) == sorted(
        _key(r)
        for r in rows
        if (r["pipeline_id"], r["checkpoint_id"]) in keys
        and r["task_id"] in tasks[(str(r["pipeline_id"]), int(r["checkpoint_id"]))]  # type: ignore[call-overload]
    )
    assert read([], None) == []


def test_an_upsert_or_update_naming_a_key_twice_writes_the_last_as_an_executemany_would(
    open_stores: Callable[..., SqlStore],
) -> None:
    """PostgreSQL refuses an upsert that meets a key twice in one statement, and an update
    from rows naming a key twice picks one of them at random: the last row wins on both."""
    store = open_stores()
    with store.engine.begin() as conn:
        upsert(
            conn,
            coordinators,
            [
                {"coordinator_id": "c1", "address": "first:1"},
                {"coordinator_id": "c2", "address": "other:1"},
                {"coordinator_id": "c1", "address": "last:1"},
            ],
            key=["coordinator_id"],
            stamp="last_seen_ms",
        )
    assert _addresses(store) == {"c1": "last:1", "c2": "other:1"}
    with store.engine.begin() as conn:
        update_rows(
            conn,
            coordinators,
            [
                {"coordinator_id": "c2", "address": "first:2"},
                {"coordinator_id": "c9", "address": "nobody:9"},  # no such row: nothing
                {"coordinator_id": "c2", "address": "last:2"},
            ],
            key=["coordinator_id"],
            stamp="last_seen_ms",
        )
    assert _addresses(store) == {"c1": "last:1", "c2": "last:2"}


def test_sqlite_gets_its_rows_as_tuples_unless_a_column_converts_its_values(
    open_stores: Callable[..., SqlStore],
) -> None:
    """On SQLite the rows go to the driver as they are (SQLAlchemy binding each row in
    Python cost the leader about 8% of its CPU); a column whose type converts its values
    on the way (a date and time, as text on SQLite) keeps SQLAlchemy's binding, and its
    values arrive converted all the same."""
    store = open_stores()
    stamped = sa.Table(
        "bulk_test_stamped",
        sa.MetaData(),
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("at", sa.DateTime, nullable=False),
    )
    ROWS.create(store.engine)
    stamped.create(store.engine)
    as_text: list[bool] = []  # per insert: handed to the driver as SQL text, uncompiled

    def seen(_conn: Any, _cursor: Any, sql: str, _params: Any, context: Any, _many: bool) -> None:
        if sql.startswith("INSERT"):
            as_text.append(context.compiled is None)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    at = datetime.datetime(2026, 11, 29, 15, 0, 1)
    with store.engine.begin() as conn:
        insert_rows(conn, ROWS, [row("p", 1, t) for t in range(5)])
        insert_rows(conn, stamped, [{"name": "a", "at": at}, {"name": "b", "at": at}])
    with store.engine.begin() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ROWS)).scalar() == 5
        assert set(conn.execute(sa.select(stamped.c.at)).scalars()) == {at}
    if store.engine.dialect.name == "sqlite":
        assert as_text == [True, False]
    else:  # one array parameter per column, through SQLAlchemy
        assert as_text == [False, False]


def test_values_of_every_column_type_and_awkward_text_are_written_as_they_are(
    open_stores: Callable[..., SqlStore],
) -> None:
    """The arrays' values round-trip whatever their text holds (quotes, backslashes, array
    syntax, the word NULL, non-ASCII), whatever the size of their integers, and a column
    all of whose values are NULL. On PostgreSQL the lists go in binary array format."""
    store = open_stores()
    kinds = sa.Table(
        "bulk_test_kinds",
        sa.MetaData(),
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("small", sa.Integer, nullable=False),
        sa.Column("big", sa.BigInteger, nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("blob", sa.LargeBinary, nullable=True),
        sa.Column("never", sa.BigInteger, nullable=True),
    )
    kinds.create(store.engine)
    texts = ['a "quoted", {braced}', "back\\slash", "NULL", "", "naïve — ✓", "tab\tline\n"]
    rows = [
        {
            "name": f"{i}:{text}",
            "small": i - 3,
            "big": None if i == 2 else (-1) ** i * 2**62 // (i + 1),
            "note": None if i == 4 else text,
            "blob": None if i == 1 else bytes(range(i * 40, i * 40 + 40)),
            "never": None,
        }
        for i, text in enumerate(texts)
    ]
    with store.engine.begin() as conn:
        insert_rows(conn, kinds, rows)
    with store.engine.begin() as conn:
        stored = sorted((dict(r) for r in conn.execute(sa.select(kinds)).mappings()), key=str)
    assert stored == sorted(rows, key=str)
    if store.engine.dialect.name == "postgresql":
        from psycopg.adapt import PyFormat
        from psycopg.types.array import ListBinaryDumper

        with store.engine.connect() as conn:
            adapters = conn.connection.dbapi_connection.adapters  # type: ignore[union-attr]
            assert adapters.get_dumper(list, PyFormat.AUTO) is ListBinaryDumper


def _all_of(keys: sa.ColumnElement[bool]) -> sa.Executable:
    return sa.select(ROWS).where(keys)


def _key(row: dict[str, object]) -> tuple[str, ...]:
    return tuple(str(v) for v in row.values())


def _addresses(store: SqlStore) -> dict[str, str]:
    with store.engine.begin() as conn:
        return {
            r.coordinator_id: r.address
            for r in conn.execute(sa.select(coordinators.c.coordinator_id, coordinators.c.address))
        }
