"""A COMPLETE checkpoint whose transactions the broker aborted records it (issue 14, hole 2).

`checkpoints` gains the error of the commit that failed for good (`data_loss_error`), when
(`data_lost_at_ms`) and when an operator moved the pipeline past it
(`data_loss_resolved_at_ms`); `checkpoint_tasks` gains `lost_at_ms`, set on the tasks whose
transactions were lost (their ranges are the lost ones). The state itself is the new
value `DATA_LOST` of the existing `state` column.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the data-loss columns (all nullable: no existing checkpoint lost data)."""
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("data_loss_error", sa.Text, nullable=True))
        batch.add_column(sa.Column("data_lost_at_ms", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("data_loss_resolved_at_ms", sa.BigInteger, nullable=True))
    with op.batch_alter_table("checkpoint_tasks") as batch:
        batch.add_column(sa.Column("lost_at_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    """Drop the data-loss columns."""
    with op.batch_alter_table("checkpoint_tasks") as batch:
        batch.drop_column("lost_at_ms")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("data_loss_resolved_at_ms")
        batch.drop_column("data_lost_at_ms")
        batch.drop_column("data_loss_error")
