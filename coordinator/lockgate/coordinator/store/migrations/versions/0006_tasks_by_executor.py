"""An index of tasks by executor, so a heartbeat reads its executor's tasks only (issue 14).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Index `tasks.executor_id`."""
    op.create_index("ix_tasks_executor_id", "tasks", ["executor_id"])


def downgrade() -> None:
    """Drop the index."""
    op.drop_index("ix_tasks_executor_id", table_name="tasks")
