"""Every coordinator replica records itself: the `coordinators` table.

The lease row names only the leader, so a replica could list the leader and itself, never
the others, and showed the time of the question as everyone's "last seen". Now each
replica writes its address and the database's clock here on every lease attempt.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create coordinators (id, address, last_seen_ms); replicas fill it as they run."""
    op.create_table(
        "coordinators",
        sa.Column("coordinator_id", sa.String(255), primary_key=True),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("last_seen_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    """Drop coordinators."""
    op.drop_table("coordinators")
