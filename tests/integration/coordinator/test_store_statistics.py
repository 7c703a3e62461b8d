"""The planner statistics the leader keeps current on PostgreSQL (`store/statistics.py`): a
table whose size moved by autovacuum's thresholds is analyzed at once, one that did not
(however much it churned) is left alone, and a leading coordinator does it on its own,
without autovacuum's minute."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.store import SqlStore, open_store
from lockgate.coordinator.store.statistics import stale_tables
from lockgate.coordinator.store.tables import idempotent_requests
from tests.support.topics import FixedTopics
from tests.support.waits import wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(postgres_url: str) -> Iterator[SqlStore]:
    """A store on a fresh PostgreSQL database, with autovacuum off for the table the tests
    grow: its own analysis of the table (a fresh database is often visited within seconds
    while the test server holds many) would reset the changed rows the tests count, and
    the leader would then rightly find nothing to do."""
    opened = open_store(postgres_url)
    with opened.engine.begin() as conn:
        conn.execute(
            sa.text(f"ALTER TABLE {idempotent_requests.name} SET (autovacuum_enabled = false)")
        )
    yield opened
    opened.close()


def delete_requests(store: SqlStore, count: int, *, first: int = 0) -> None:
    """Delete the `count` rows of `write_requests` from `first` on, counts published at once."""
    with store.engine.begin() as conn:
        conn.execute(
            idempotent_requests.delete().where(
                idempotent_requests.c.request_id.in_([f"r{i}" for i in range(first, first + count)])
            )
        )
        conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))


def write_requests(store: SqlStore, count: int, *, first: int = 0) -> None:
    """Insert `count` rows into `idempotent_requests` (a table with no foreign key), and
    have this session's counts published at once rather than within the next second."""
    with store.engine.begin() as conn:
        conn.execute(
            idempotent_requests.insert(),
            [
                {
                    "request_id": f"r{i}",
                    "method": "CreatePipeline",
                    "request_hash": "0" * 64,
                    "response": b"",
                    "created_at_ms": i,
                }
                for i in range(first, first + count)
            ],
        )
        conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))


def _scalar(store: SqlStore, query: str, table: str) -> float:
    with store.engine.connect() as conn:
        return float(conn.execute(sa.text(query), {"t": table}).scalar_one())


def planned_rows(store: SqlStore, table: str) -> float:
    """The row count the planner's statistics give `table` (-1: never analyzed)."""
    return _scalar(store, "SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)", table)


def manual_analyses(store: SqlStore, table: str) -> int:
    """How many times `table` was analyzed by an ANALYZE command (autovacuum's own analyses
    are counted apart, in `autoanalyze_count`)."""
    query = "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = :t"
    return int(_scalar(store, query, table))


def changed_rows(store: SqlStore, table: str) -> int:
    """The rows of `table` changed since its last analysis, as the statistics count them."""
    query = "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = :t"
    return int(_scalar(store, query, table))


def table_statistics(store: SqlStore, table: str) -> str:
    """What the server counts of `table`'s changes and analyses, for a failure's message."""
    query = sa.text(
        "SELECT n_mod_since_analyze, analyze_count, autoanalyze_count, last_autoanalyze "
        "FROM pg_stat_user_tables WHERE relname = :t"
    )
    with store.engine.connect() as conn:
        row = conn.execute(query, {"t": table}).one()
    return f"{table}: {dict(row._mapping)}"


def seen_stale(store: SqlStore) -> list[str]:
    with store.engine.connect() as conn:
        return stale_tables(conn)


def test_a_table_grown_by_autovacuums_thresholds_is_analyzed_and_no_other(
    store: SqlStore,
) -> None:
    name = idempotent_requests.name
    assert store.refresh_statistics() == [], "a fresh schema has nothing to analyze"
    assert planned_rows(store, name) < 0

    write_requests(store, 1_000)
    wait_for(f"{name} counted as changed", lambda: name in seen_stale(store), timeout_s=15)
    assert store.refresh_statistics() == [name]
    assert planned_rows(store, name) == 1_000
    assert manual_analyses(store, name) == 1

    # Analyzed: nothing changed since. Then one change short of 50 + a tenth of 1,000.
    assert store.refresh_statistics() == []
    write_requests(store, 149, first=1_000)
    wait_for(f"{name}'s 149 rows counted", lambda: changed_rows(store, name) == 149, timeout_s=15)
    assert store.refresh_statistics() == []
    write_requests(store, 1, first=1_149)
    wait_for(f"{name}'s 150th row counted", lambda: changed_rows(store, name) == 150, timeout_s=15)
    assert store.refresh_statistics() == [name]
    assert planned_rows(store, name) == 1_150


def test_churn_at_a_steady_size_is_left_to_autovacuum_and_shrinking_is_not(
    store: SqlStore,
) -> None:
    """Pruned history deletes about as many rows as checkpoints insert: the planner's
    picture of such a table holds, and analyzing it again and again only takes CPU from the
    checkpoints. A table that shrank by the thresholds is analyzed, as one that grew."""
    name = idempotent_requests.name
    write_requests(store, 1_000)
    wait_for(f"{name} counted as grown", lambda: name in seen_stale(store), timeout_s=15)
    assert store.refresh_statistics() == [name]

    # 600 rows replaced: 1,200 changes (the churn rule's 150 eight times over), same size.
    delete_requests(store, 600)
    write_requests(store, 600, first=1_000)
    wait_for(f"{name}'s churn counted", lambda: changed_rows(store, name) == 1_200, timeout_s=15)
    assert store.refresh_statistics() == []
    assert manual_analyses(store, name) == 1

    # Then 150 fewer rows: 850 of the 1,000 the planner counts.
    delete_requests(store, 150, first=1_000)
    wait_for(f"{name}'s deletes counted", lambda: changed_rows(store, name) == 1_350, timeout_s=15)
    assert store.refresh_statistics() == [name]
    assert planned_rows(store, name) == 850


def test_few_changes_leave_the_statistics_as_they_are(store: SqlStore) -> None:
    name = idempotent_requests.name
    write_requests(store, 49)
    wait_for(f"{name}'s 49 rows counted", lambda: changed_rows(store, name) == 49, timeout_s=15)
    assert store.refresh_statistics() == []
    assert manual_analyses(store, name) == 0


def test_a_leading_coordinator_analyzes_a_grown_table_without_autovacuum(
    store: SqlStore,
) -> None:
    """The leader's own thread: ANALYZE's count (autovacuum counts its own apart) goes up
    for a table that grew, within a few of its looks."""
    herder = Herder(
        store=store,
        settings=CoordinatorSettings(coordinator_id=CoordinatorId("c1"), advertise="c1:1"),
        topics=FixedTopics(partitions=1),  # type: ignore[arg-type]
    )
    herder.start()
    try:
        wait_for("c1 leading", herder.lease_keeper.current_fence, timeout_s=15)
        write_requests(store, 500)
        wait_for(
            "the leader to analyze idempotent_requests",
            lambda: manual_analyses(store, idempotent_requests.name) >= 1,
            timeout_s=30,
            explain=lambda: table_statistics(store, idempotent_requests.name),
        )
        assert planned_rows(store, idempotent_requests.name) == 500
    finally:
        herder.stop()
