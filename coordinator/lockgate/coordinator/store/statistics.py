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

So the leader looks every few seconds (`herder/planner_statistics.py`) and analyzes at once a
table whose size moved away from the one the planner believes: by at least `BASE_ROWS` plus
`SHARE` of the rows it was analyzed with, grown or shrunk (autovacuum's thresholds, applied
to the size). A table that churns at a steady size is left to autovacuum's minute: once a
pipeline's history is pruned (`checkpoint_history` checkpoints kept), each checkpoint deletes
about as many rows as it inserts, and the planner's picture of the tables holds. By the
churn rule, a 100-task pipeline's `checkpoint_tasks` (100,000 rows at the default 1,000
checkpoints kept; each checkpoint inserts, updates and deletes 100) was analyzed again every
34 checkpoints, at each 5 s look at a 100 ms interval, for as long as it ran (ANALYZE of
`checkpoint_tasks` took 62 ms in the round-trip bench, where it is still growing). ANALYZE
takes a lock that neither reads nor writes wait for, and samples at most 30,000 rows of a
table; a table whose size holds costs nothing but the one read of the counters. SQLite's
planner does not assume a table is as small as it was (and has no autovacuum to wait for):
nothing is done there.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from lockgate.coordinator.store.tables import metadata

#: A table is analyzed once its size moved by this many rows, plus `SHARE` of its rows at the
#: last analysis: autovacuum's defaults (`autovacuum_analyze_threshold`, `..._scale_factor`).
BASE_ROWS = 50
SHARE = 0.1

_TABLES = sorted(table.name for table in metadata.sorted_tables)

# The rows each of the coordinator's tables (in the current schema) holds now, as the server
# counts them, and the rows the planner believes it has (-1 before the first analysis).
_SIZES = sa.text(
    """
    SELECT s.relname, s.n_live_tup, c.reltuples
    FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
    WHERE s.schemaname = current_schema() AND s.relname IN :names
    """
).bindparams(sa.bindparam("names", expanding=True))


def is_stale(live_rows: int, planned_rows: float) -> bool:
    """Whether a table that holds `live_rows` rows now, and whose planner statistics count
    `planned_rows` (negative: never analyzed), needs ANALYZE: its size moved by
    `BASE_ROWS` plus `SHARE` of the planned rows, either way."""
    planned = max(planned_rows, 0.0)
    return abs(live_rows - planned) >= BASE_ROWS + SHARE * planned


def stale_tables(conn: Connection) -> list[str]:
    """The coordinator's tables whose size moved enough since their last analysis
    (`is_stale`), by name."""
    rows = conn.execute(_SIZES, {"names": _TABLES})
    return sorted(name for name, live, planned in rows if is_stale(int(live), planned))


def refresh_statistics(engine: Engine) -> list[str]:
    """Analyze the coordinator's tables whose size moved enough since their last analysis, on
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
