"""An index of checkpoints by pipeline and state, so the reads of a pipeline's checkpoints
in some states (in flight, COMPLETE, ABORTED, an unresolved DATA_LOST) cost those
checkpoints, not the pipeline's whole history (up to `--checkpoint-history` rows; issue 14).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Index `checkpoints (pipeline_id, state, checkpoint_id)`."""
    op.create_index(
        "ix_checkpoints_pipeline_state", "checkpoints", ["pipeline_id", "state", "checkpoint_id"]
    )


def downgrade() -> None:
    """Drop the index."""
    op.drop_index("ix_checkpoints_pipeline_state", table_name="checkpoints")
