"""The PostgreSQL fixture serves real SQL, and each test gets its own database."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
import sqlalchemy as sa

from lockgate.localcluster.postgres import PostgresCluster, PostgresError

pytestmark = [pytest.mark.postgres]


def test_create_table_insert_and_read(postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE pipelines (id TEXT PRIMARY KEY, version INT)"))
            conn.execute(
                sa.text("INSERT INTO pipelines VALUES (:id, :version)"),
                [{"id": "orders", "version": 1}, {"id": "clicks", "version": 3}],
            )
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, version FROM pipelines ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [("clicks", 3), ("orders", 1)]
    finally:
        engine.dispose()


def test_two_databases_are_isolated(postgres_database_factory: Callable[[], str]) -> None:
    first, second = postgres_database_factory(), postgres_database_factory()
    assert first != second
    engine_a, engine_b = sa.create_engine(first), sa.create_engine(second)
    try:
        with engine_a.begin() as conn:
            conn.execute(sa.text("CREATE TABLE leader_lease (holder TEXT)"))
            conn.execute(sa.text("INSERT INTO leader_lease VALUES ('coordinator-1')"))
        with engine_b.connect() as conn:
            visible = conn.execute(
                sa.text("SELECT count(*) FROM information_schema.tables WHERE table_name = :t"),
                {"t": "leader_lease"},
            ).scalar_one()
        assert visible == 0
    finally:
        engine_a.dispose()
        engine_b.dispose()


def test_prepared_transactions_are_enabled(postgres_url: str) -> None:
    # The PostgreSQL sink pre-commits with PREPARE TRANSACTION; a prepared transaction
    # survives its session and another session can commit it.
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE sink (v INT)"))
        with engine.connect() as conn:
            conn.execute(sa.text("INSERT INTO sink VALUES (7)"))
            conn.execute(sa.text("PREPARE TRANSACTION 'lockgate-ckpt-1'"))
            conn.rollback()  # ends SQLAlchemy's view of the transaction; the prepared one stays
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM sink")).scalar_one() == 0
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("COMMIT PREPARED 'lockgate-ckpt-1'"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT v FROM sink")).scalar_one() == 7
    finally:
        engine.dispose()


def test_server_does_not_run_as_root(postgres_cluster: PostgresCluster, postgres_url: str) -> None:
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT current_user")).scalar_one() == "postgres"
    finally:
        engine.dispose()
    pid = postgres_cluster.pid
    assert pid is not None
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        uid_line = next(line for line in status if line.startswith("Uid:"))
    assert int(uid_line.split()[1]) != 0


def test_bad_and_duplicate_database_names_are_refused(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    with pytest.raises(ValueError, match="database name 'Robert; DROP' is invalid"):
        postgres_cluster.create_database("Robert; DROP")
    existing = postgres_url.rsplit("/", 1)[1]
    with pytest.raises(PostgresError, match="already exists"):
        postgres_cluster.create_database(existing)


def test_stop_removes_everything() -> None:
    cluster = PostgresCluster().start()
    base_dir, pid, port = cluster.base_dir, cluster.pid, cluster.port
    assert pid is not None
    cluster.stop()
    cluster.stop()  # idempotent
    assert not base_dir.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", connect_timeout=2
        )
    assert not _process_alive(pid)


def _process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            state = next(line for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return False
    return "Z" not in state.split()[1]


def test_a_killed_server_restarts_on_its_data_and_port_with_committed_rows_kept() -> None:
    with PostgresCluster(durable=True) as cluster:
        url = cluster.create_database("crashed")
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("CREATE TABLE checkpoints (id INT)"))
                conn.execute(sa.text("INSERT INTO checkpoints VALUES (1)"))
            old_pid, port = cluster.pid, cluster.port
            assert old_pid is not None
            cluster.kill()
            assert not _process_alive(old_pid)
            # A new connection, not a pooled one: a pooled connection's backend may not yet
            # have seen its postmaster die, and would still answer.
            engine.dispose()
            with pytest.raises(sa.exc.OperationalError), engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            cluster.restart()
            assert (cluster.port, cluster.url("crashed")) == (port, url)
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT id FROM checkpoints")).scalar_one() == 1
        finally:
            engine.dispose()


def test_killing_a_server_that_would_lose_its_last_commits_is_refused() -> None:
    # Without durable=True synchronous_commit is off: a crash test on it would see commits
    # vanish that no production server loses.
    with PostgresCluster() as cluster:
        with pytest.raises(PostgresError, match="durable=True"):
            cluster.kill()
        assert cluster.pid is not None and _process_alive(cluster.pid)
