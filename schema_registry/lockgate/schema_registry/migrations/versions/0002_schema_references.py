"""Schema references: the (name, subject, version) triples a schema resolves named types from."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``sr_schema_references`` and its index on the referenced version."""
    op.create_table(
        "sr_schema_references",
        sa.Column("schema_id", sa.Integer, sa.ForeignKey("sr_schemas.id"), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_index("sr_schema_references_target", "sr_schema_references", ["subject", "version"])


def downgrade() -> None:
    """Drop ``sr_schema_references``."""
    op.drop_index("sr_schema_references_target", "sr_schema_references")
    op.drop_table("sr_schema_references")
