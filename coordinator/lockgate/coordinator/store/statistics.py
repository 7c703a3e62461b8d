"""The PostgreSQL planner's statistics of the coordinator's tables, kept current by the leader.

PostgreSQL plans each statement from the table statistics the last ANALYZE left. Its
autovacuum analyzes a table once 50 rows plus a tenth of it changed, but it looks only once a
minute (`autovacuum_naptime`), and Lockgate's tables grow fast from empty: a 100-task
pipeline writes 100 `checkpoint_tasks` rows a checkpoint, several checkpoints a second. Until
autovacuum's first look, the planner takes each table for the near-empty one it was, and
scans it whole where an index finds the rows. Measured on the round-trip bench (one 100-task
pipeline, a fresh database, `auto_explain`): the trigger's read of a pipeline's lingering
aborts walked all 4,000-9,000 task rows of its history, 36 ms a trigger at p50 (0.2 ms by
index); the report batch's read and update of its task rows, each a sequential scan of the
table, 7 ms each.

So the leader applies autovacuum's own rule itself, every few seconds
(`herder/planner_statistics.py`): a table with at least `BASE_ROWS` plus `SHARE` of its
rows at the last analysis changed since is analyzed now. ANALYZE takes a lock that neither
reads nor writes wait for, and samples at most 30,000 rows of a table, so it costs
milliseconds; a table that did not change costs nothing but the one read of the counters.
SQLite's planner does not assume a table is as small as it was (and has no autovacuum to
wait for): nothing is done there.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from lockgate.coordinator.store.tables import metadata

#: A table is analyzed once this many rows, plus `SHARE` of its rows at the last analysis,
#: changed since: autovacuum's defaults (`autovacuum_analyze_threshold`, `..._scale_factor`).
BASE_ROWS = 50
SHARE = 0.1

_TABLES = sorted(table.name for table in metadata.sorted_tables)

# Changed rows since the last analysis, and the rows the planner believes the table has
# (-1 before the first analysis), of the coordinator's tables in the current schema.
_CHANGED = sa.text(
    """
    SELECT s.relname, s.n_mod_since_analyze, c.reltuples
    FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
    WHERE s.schemaname = current_schema() AND s.relname IN :names
    """
).bindparams(sa.bindparam("names", expanding=True))


def is_stale(changed_rows: int, planned_rows: float) -> bool:
    """Whether a table whose planner statistics count `planned_rows` rows (negative: never
    analyzed), with `changed_rows` rows inserted, updated or deleted since, needs ANALYZE."""
    return changed_rows >= BASE_ROWS + SHARE * max(planned_rows, 0.0)


def stale_tables(conn: Connection) -> list[str]:
    """The coordinator's tables that changed enough since their last analysis (`is_stale`),
    by name."""
    rows = conn.execute(_CHANGED, {"names": _TABLES})
    return sorted(name for name, changed, planned in rows if is_stale(int(changed), planned))


def refresh_statistics(engine: Engine) -> list[str]:
    """Analyze the coordinator's tables that changed enough since their last analysis, on
    PostgreSQL (nothing elsewhere); the names of those analyzed. Each ANALYZE commits on its
    own, outside the replica's write turn: it writes no state of Lockgate's."""
    if engine.dialect.name != "postgresql":
        return []
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        stale = stale_tables(conn)
        for name in stale:
            conn.execute(sa.text(f"ANALYZE {conn.dialect.identifier_preparer.quote(name)}"))
    return stale
