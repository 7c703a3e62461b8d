"""The lease row records which process of its holder took the term.

A restarted coordinator keeps its id; without the incarnation its first lease attempt
renewed the term of the process before it (same epoch), so a paused old process and the
new one shared one fencing token. Now a new process of the same id acquires like any other
contender: after expiry, with epoch + 1.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add leader_lease.holder_incarnation (NULL: the term of a process from before)."""
    with op.batch_alter_table("leader_lease") as batch:
        batch.add_column(sa.Column("holder_incarnation", sa.String(64), nullable=True))


def downgrade() -> None:
    """Drop leader_lease.holder_incarnation."""
    with op.batch_alter_table("leader_lease") as batch:
        batch.drop_column("holder_incarnation")
