"""Initial tables: schemas, subject versions, compatibility configs."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the three registry tables and their indexes."""
    op.create_table(
        "sr_schemas",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("fingerprint", sa.String(64), nullable=False, unique=True),
        sa.Column("schema_type", sa.String(16), nullable=False),
        sa.Column("schema_text", sa.Text, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_table(
        "sr_subject_versions",
        sa.Column("subject", sa.String(255), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("schema_id", sa.Integer, sa.ForeignKey("sr_schemas.id"), nullable=False),
        sa.Column("deleted", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index(
        "sr_subject_versions_live_schema",
        "sr_subject_versions",
        ["subject", "schema_id"],
        unique=True,
        postgresql_where=sa.text("NOT deleted"),
        sqlite_where=sa.text("NOT deleted"),
    )
    op.create_index("sr_subject_versions_schema_id", "sr_subject_versions", ["schema_id"])
    op.create_table(
        "sr_configs",
        sa.Column("subject", sa.String(255), primary_key=True),
        sa.Column("compatibility", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    """Drop the registry tables."""
    op.drop_table("sr_configs")
    op.drop_index("sr_subject_versions_schema_id", "sr_subject_versions")
    op.drop_index("sr_subject_versions_live_schema", "sr_subject_versions")
    op.drop_table("sr_subject_versions")
    op.drop_table("sr_schemas")
