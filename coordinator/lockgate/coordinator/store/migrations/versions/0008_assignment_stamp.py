"""A stamp that changes whenever an executor's assignment or its tasks' states may have,
kept by triggers, so a heartbeat whose executor's tasks did not change reads one row
instead of all of them (issue 14: heartbeat cost proportional to changes).

Which writes bump it: any INSERT or DELETE of `tasks` or `pipelines`, an UPDATE of the
`tasks` columns a heartbeat's answer or its state reports are made of (executor, generation,
partitions, state, who reported it, its error), and an UPDATE of a pipeline's config version
or target state. Not a checkpoint's trigger (`pipelines.next_checkpoint_id`) nor a task's
`updated_at_ms` alone. SQLite triggers run per row, PostgreSQL's per statement.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_BUMP = "UPDATE assignment_stamp SET stamp = stamp + 1 WHERE id = 1"
_TASK_COLUMNS = (
    "executor_id, generation, partitions_json, state, state_executor_id, "
    "state_executor_generation, last_error"
)
_PIPELINE_COLUMNS = "config_version, target_state"
#: (trigger name, event, table) of every trigger.
_TRIGGERS = (
    ("assignment_stamp_tasks_insert", "INSERT", "tasks"),
    ("assignment_stamp_tasks_delete", "DELETE", "tasks"),
    ("assignment_stamp_tasks_update", f"UPDATE OF {_TASK_COLUMNS}", "tasks"),
    ("assignment_stamp_pipelines_insert", "INSERT", "pipelines"),
    ("assignment_stamp_pipelines_delete", "DELETE", "pipelines"),
    ("assignment_stamp_pipelines_update", f"UPDATE OF {_PIPELINE_COLUMNS}", "pipelines"),
)
_PG_FUNCTION = "lockgate_bump_assignment_stamp"


def upgrade() -> None:
    """Create the one-row `assignment_stamp` table and the triggers that bump it."""
    table = op.create_table(
        "assignment_stamp",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("stamp", sa.BigInteger, nullable=False),
    )
    assert table is not None
    op.bulk_insert(table, [{"id": 1, "stamp": 0}])
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            f"CREATE FUNCTION {_PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {_BUMP}; RETURN NULL; END $$"
        )
        for name, event, table_name in _TRIGGERS:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table_name} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {_PG_FUNCTION}()"
            )
        return
    for name, event, table_name in _TRIGGERS:
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON {table_name} FOR EACH ROW BEGIN {_BUMP}; END"
        )


def downgrade() -> None:
    """Drop the triggers, their function and the table."""
    postgresql = op.get_context().dialect.name == "postgresql"
    for name, _, table_name in _TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table_name}" if postgresql else f"DROP TRIGGER {name}")
    if postgresql:
        op.execute(f"DROP FUNCTION {_PG_FUNCTION}()")
    op.drop_table("assignment_stamp")
