"""Initial coordinator tables: lease, executors, pipelines, tasks, checkpoints, offsets.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _checkpoint_fk() -> sa.ForeignKeyConstraint:
    """A fresh constraint per table: rows of a deleted checkpoint go with it."""
    return sa.ForeignKeyConstraint(
        ["pipeline_id", "checkpoint_id"],
        ["checkpoints.pipeline_id", "checkpoints.checkpoint_id"],
        ondelete="CASCADE",
    )


def upgrade() -> None:
    """Create every table, and the single lease row nobody holds yet."""
    lease = op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("holder", sa.String(255), nullable=True),
        sa.Column("holder_address", sa.String(255), nullable=True),
        sa.Column("leader_epoch", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    )
    assert lease is not None
    op.bulk_insert(
        lease,
        [{"id": 1, "holder": None, "holder_address": None, "leader_epoch": 0, "expires_at_ms": 0}],
    )
    op.create_table(
        "executors",
        sa.Column("executor_id", sa.String(255), primary_key=True),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
        sa.Column("last_heartbeat_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "pipelines",
        sa.Column("pipeline_id", sa.String(63), primary_key=True),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("config_version", sa.BigInteger, nullable=False),
        sa.Column("target_state", sa.String(16), nullable=False),
        sa.Column("next_checkpoint_id", sa.BigInteger, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(127), primary_key=True),
        sa.Column(
            "pipeline_id",
            sa.String(63),
            sa.ForeignKey("pipelines.pipeline_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("task_index", sa.Integer, nullable=False),
        sa.Column("partitions_json", sa.Text, nullable=False),
        sa.Column("executor_id", sa.String(255), nullable=True),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_executor_id", sa.String(255), nullable=True),
        sa.Column("state_executor_generation", sa.BigInteger, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("pipeline_id", "task_index", name="uq_tasks_pipeline_index"),
    )
    op.create_table(
        "checkpoints",
        sa.Column(
            "pipeline_id",
            sa.String(63),
            sa.ForeignKey("pipelines.pipeline_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("leader_epoch", sa.BigInteger, nullable=False),
        sa.Column("triggered_at_ms", sa.BigInteger, nullable=False),
        sa.Column("completed_at_ms", sa.BigInteger, nullable=True),
        sa.Column("committed_at_ms", sa.BigInteger, nullable=True),
        sa.Column("aborted_at_ms", sa.BigInteger, nullable=True),
        sa.Column("abort_reason", sa.Text, nullable=True),
    )
    op.create_index("ix_checkpoints_state", "checkpoints", ["state"])
    op.create_table(
        "checkpoint_tasks",
        sa.Column("pipeline_id", sa.String(63), primary_key=True),
        sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
        sa.Column("task_id", sa.String(127), primary_key=True),
        sa.Column("task_generation", sa.BigInteger, nullable=False),
        sa.Column("executor_id", sa.String(255), nullable=True),
        sa.Column("slot", sa.Integer, nullable=False),
        sa.Column("transactional_id", sa.String(255), nullable=False),
        sa.Column("precommitted_at_ms", sa.BigInteger, nullable=True),
        sa.Column("commit_acked_at_ms", sa.BigInteger, nullable=True),
        sa.Column("abort_acked_at_ms", sa.BigInteger, nullable=True),
        _checkpoint_fk(),
    )
    op.create_table(
        "precommit_offsets",
        sa.Column("pipeline_id", sa.String(63), primary_key=True),
        sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("task_id", sa.String(127), nullable=False),
        sa.Column("start_offset", sa.BigInteger, nullable=False),
        sa.Column("end_offset", sa.BigInteger, nullable=False),
        _checkpoint_fk(),
    )
    op.create_table(
        "precommit_handles",
        sa.Column("pipeline_id", sa.String(63), primary_key=True),
        sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
        sa.Column("task_id", sa.String(127), primary_key=True),
        sa.Column("transactional_id", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("producer_id", sa.BigInteger, nullable=False),
        sa.Column("producer_epoch", sa.Integer, nullable=False),
        _checkpoint_fk(),
    )
    op.create_table(
        "transactional_ids",
        sa.Column("transactional_id", sa.String(255), primary_key=True),
        sa.Column(
            "pipeline_id",
            sa.String(63),
            sa.ForeignKey("pipelines.pipeline_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("task_index", sa.Integer, nullable=False),
        sa.Column("slot", sa.Integer, nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger, nullable=True),
        sa.Column("producer_id", sa.BigInteger, nullable=True),
        sa.Column("producer_epoch", sa.Integer, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("pipeline_id", "task_index", "slot", name="uq_txid_slot"),
    )
    op.create_table(
        "source_offsets",
        sa.Column(
            "pipeline_id",
            sa.String(63),
            sa.ForeignKey("pipelines.pipeline_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    """Drop every table (loses all coordinator state)."""
    for table in (
        "source_offsets",
        "transactional_ids",
        "precommit_handles",
        "precommit_offsets",
        "checkpoint_tasks",
        "checkpoints",
        "tasks",
        "pipelines",
        "executors",
        "leader_lease",
    ):
        op.drop_table(table)
