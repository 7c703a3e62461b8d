"""Mutating calls remember their `request_id` so a retry gets the first answer (issue 9).

`idempotent_requests` keeps, per client-chosen `request_id`, the RPC it named (`method`),
a SHA-256 of the request without its id (`request_hash`: the same id with another request is
refused), the serialized response and when it was recorded (`created_at_ms`, database
clock; rows older than the retention are pruned, hence the index).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table of recorded requests (empty: no earlier call was recorded)."""
    op.create_table(
        "idempotent_requests",
        sa.Column("request_id", sa.String(255), primary_key=True),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("response", sa.LargeBinary, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_idempotent_requests_created_at_ms", "idempotent_requests", ["created_at_ms"]
    )


def downgrade() -> None:
    """Drop the table of recorded requests."""
    op.drop_index("ix_idempotent_requests_created_at_ms", table_name="idempotent_requests")
    op.drop_table("idempotent_requests")
