"""Registry modes (Confluent's READWRITE / READONLY / IMPORT), global and per subject."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``sr_modes``."""
    op.create_table(
        "sr_modes",
        sa.Column("subject", sa.String(255), primary_key=True),
        sa.Column("mode", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    """Drop ``sr_modes``."""
    op.drop_table("sr_modes")
