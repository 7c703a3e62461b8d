"""Table definitions of the coordinator's state (declarations only; statements live in
the sub-stores beside this module). Migrations in `migrations/versions` create exactly
these tables, as tests/integration/test_migrations.py checks.

Times are integer milliseconds since the Unix epoch as read from the *database's* clock
(`engine.db_now_ms`), so replicas with skewed clocks agree on them.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

LEASE_ROW_ID = 1

leader_lease = sa.Table(
    "leader_lease",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("holder", sa.String(255), nullable=True),
    # Which process of `holder` took the term (a restarted replica is a new incarnation).
    sa.Column("holder_incarnation", sa.String(64), nullable=True),
    sa.Column("holder_address", sa.String(255), nullable=True),
    sa.Column("leader_epoch", sa.BigInteger, nullable=False),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
)

# Every coordinator replica, written by the replica itself on each lease attempt (the
# lease row names only the leader): `lockgate cluster status` lists them from here.
coordinators = sa.Table(
    "coordinators",
    metadata,
    sa.Column("coordinator_id", sa.String(255), primary_key=True),
    sa.Column("address", sa.String(255), nullable=False),
    sa.Column("last_seen_ms", sa.BigInteger, nullable=False),
)

executors = sa.Table(
    "executors",
    metadata,
    sa.Column("executor_id", sa.String(255), primary_key=True),
    sa.Column("address", sa.String(255), nullable=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
    sa.Column("last_heartbeat_ms", sa.BigInteger, nullable=False),
)

pipelines = sa.Table(
    "pipelines",
    metadata,
    sa.Column("pipeline_id", sa.String(63), primary_key=True),
    sa.Column("spec_json", sa.Text, nullable=False),
    sa.Column("config_version", sa.BigInteger, nullable=False),
    sa.Column("target_state", sa.String(16), nullable=False),
    sa.Column("next_checkpoint_id", sa.BigInteger, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
)

tasks = sa.Table(
    "tasks",
    metadata,
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
    # A heartbeat reads its executor's tasks only (0006).
    sa.Index("ix_tasks_executor_id", "executor_id"),
)

ASSIGNMENT_STAMP_ROW_ID = 1

# One row whose `stamp` grows in every transaction that changes what a heartbeat's answer
# is made of: a task created, deleted, moved, restarted or its state reported, a pipeline
# created, deleted, updated or paused/resumed/stopped. Kept by the database's own triggers
# (migration 0008), so no write path can forget it; a heartbeat that finds it unchanged
# reuses its executor's tasks as read before instead of reading them again (issue 14).
assignment_stamp = sa.Table(
    "assignment_stamp",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("stamp", sa.BigInteger, nullable=False),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
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
    # DATA_LOST: the commit's error, when, and when an operator moved past it (0004).
    sa.Column("data_loss_error", sa.Text, nullable=True),
    sa.Column("data_lost_at_ms", sa.BigInteger, nullable=True),
    sa.Column("data_loss_resolved_at_ms", sa.BigInteger, nullable=True),
    sa.Index("ix_checkpoints_state", "state"),
    # A pipeline's checkpoints in some states, without walking its history (0007).
    sa.Index("ix_checkpoints_pipeline_state", "pipeline_id", "state", "checkpoint_id"),
)

checkpoint_tasks = sa.Table(
    "checkpoint_tasks",
    metadata,
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
    # Set when the broker aborted this task's transactions of a DATA_LOST checkpoint (0004).
    sa.Column("lost_at_ms", sa.BigInteger, nullable=True),
    sa.ForeignKeyConstraint(
        ["pipeline_id", "checkpoint_id"],
        ["checkpoints.pipeline_id", "checkpoints.checkpoint_id"],
        ondelete="CASCADE",
    ),
)

precommit_offsets = sa.Table(
    "precommit_offsets",
    metadata,
    sa.Column("pipeline_id", sa.String(63), primary_key=True),
    sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("task_id", sa.String(127), nullable=False),
    sa.Column("start_offset", sa.BigInteger, nullable=False),
    sa.Column("end_offset", sa.BigInteger, nullable=False),
    sa.ForeignKeyConstraint(
        ["pipeline_id", "checkpoint_id"],
        ["checkpoints.pipeline_id", "checkpoints.checkpoint_id"],
        ondelete="CASCADE",
    ),
)

precommit_handles = sa.Table(
    "precommit_handles",
    metadata,
    sa.Column("pipeline_id", sa.String(63), primary_key=True),
    sa.Column("checkpoint_id", sa.BigInteger, primary_key=True),
    sa.Column("task_id", sa.String(127), primary_key=True),
    sa.Column("transactional_id", sa.String(255), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("producer_id", sa.BigInteger, nullable=False),
    sa.Column("producer_epoch", sa.Integer, nullable=False),
    sa.ForeignKeyConstraint(
        ["pipeline_id", "checkpoint_id"],
        ["checkpoints.pipeline_id", "checkpoints.checkpoint_id"],
        ondelete="CASCADE",
    ),
)

transactional_ids = sa.Table(
    "transactional_ids",
    metadata,
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

source_offsets = sa.Table(
    "source_offsets",
    metadata,
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

# The answer of each mutating call that carried a request_id, so a retry gets it again
# (`request_store.py`); pruned after the retention of `domain/requests.py`.
idempotent_requests = sa.Table(
    "idempotent_requests",
    metadata,
    sa.Column("request_id", sa.String(255), primary_key=True),
    sa.Column("method", sa.String(64), nullable=False),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("response", sa.LargeBinary, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Index("ix_idempotent_requests_created_at_ms", "created_at_ms"),
)
