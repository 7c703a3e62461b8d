"""The leader ending a COMPLETE checkpoint's transactions itself (issue 14, holes 2 and 3).

Commits normally go to an executor (`herder/executors.py`), whose `committer.py` ends each
transaction through the resume path. The leader has the same handles in SQL and the same
path (`common/kafka_transactions.py`: FindCoordinator + EndTxn with the stored producer id
and epoch, never `init_transactions`), so it uses it itself in two cases:

- no executor is alive: a COMPLETE checkpoint must not wait for one while its
  transactions run towards the broker's `transaction.timeout.ms`;
- an executor answered DATA_LOSS: one handle cannot be committed any more, and the
  executor stopped at it. The leader then tries every handle of the checkpoint one by one
  (a repeated commit answers NONE), so it knows exactly which tasks' output was lost and
  commits the rest; the COMPLETE checkpoints after it are aborted (`abort_from_leader`)
  before they go DATA_LOST with it (`domain/data_loss.py`).

Leader-only, like every caller of it; blocking (one EndTxn round trip per handle).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from lockgate.common.kafka_config import SecretReferenceError, resolve_properties
from lockgate.common.kafka_transactions import (
    TransactionNotAnswered,
    abort_handles,
    commit_handles,
)
from lockgate.common.model.ids import TaskId
from lockgate.common.model.pipeline_spec import KafkaSink
from lockgate.coordinator.domain.checkpoints import PendingCommit

_LOG = logging.getLogger(__name__)

#: Deadline of one handle's EndTxn (the executors' commit RPC deadline is the same 5 s).
DEFAULT_LEADER_COMMIT_TIMEOUT_S = 5.0


class CommitNotAcked(Exception):
    """Kafka did not answer in time: nothing is known lost, try again later."""


@dataclass(frozen=True)
class LeaderCommitOutcome:
    """What committing every handle of one checkpoint from the leader found."""

    committed: int
    """Handles committed (now or before)."""
    lost: dict[TaskId, str] = field(default_factory=dict)
    """Per task whose transactions cannot be committed any more, the broker's answer."""


def _sink_properties(sink: KafkaSink, what: str) -> dict[str, str]:
    """The sink's Kafka properties, their references resolved in this process (the
    coordinator's environment and files); `CommitNotAcked` naming the reference if one
    cannot be read here."""
    try:
        return resolve_properties(sink.properties)
    except SecretReferenceError as exc:
        raise CommitNotAcked(f"{what}: sink.kafka.properties: {exc}") from None


def commit_from_leader(
    commit: PendingCommit,
    *,
    sink: KafkaSink,
    timeout_s: float = DEFAULT_LEADER_COMMIT_TIMEOUT_S,
) -> LeaderCommitOutcome:
    """Commit every handle of COMPLETE checkpoint `commit` on the sink cluster (with the
    sink's Kafka properties), one by one; idempotent. Leader-only. `CommitNotAcked` if
    Kafka did not answer for one (retry)."""
    bootstrap_servers = sink.bootstrap_servers
    what = f"checkpoint {commit.checkpoint_id} of {commit.pipeline_id}"
    properties = _sink_properties(sink, what)
    committed = 0
    lost: dict[TaskId, str] = {}
    try:
        for task_handles in commit.handles:
            handles = [h.on(bootstrap_servers) for h in task_handles.handles]
            for ended in commit_handles(handles, timeout_s=timeout_s, properties=properties):
                if ended.refused is not None:
                    lost.setdefault(task_handles.task_id, str(ended.refused))
                else:
                    committed += 1
    except TransactionNotAnswered as exc:
        raise CommitNotAcked(f"{what}: {exc}") from exc
    return LeaderCommitOutcome(committed=committed, lost=lost)


def abort_from_leader(
    commits: Sequence[PendingCommit],
    *,
    sink: KafkaSink,
    timeout_s: float = DEFAULT_LEADER_COMMIT_TIMEOUT_S,
) -> None:
    """Abort every handle of COMPLETE checkpoints that follow a DATA_LOST one (they must
    never be committed); idempotent (fenced or unknown counts as aborted). Leader-only.
    `CommitNotAcked` if Kafka did not answer for one (retry)."""
    bootstrap_servers = sink.bootstrap_servers
    properties = _sink_properties(sink, "abort after a data loss") if commits else {}
    for commit in commits:
        handles = [h.on(bootstrap_servers) for t in commit.handles for h in t.handles]
        try:
            for ended in abort_handles(handles, timeout_s=timeout_s, properties=properties):
                if ended.refused is not None:
                    # Already committed (commits go in order, so never by this leader):
                    # nothing to abort; its records are in the sink.
                    _LOG.error(
                        "checkpoint %s of %s: %s was committed although an earlier checkpoint"
                        " lost its records",
                        commit.checkpoint_id,
                        commit.pipeline_id,
                        ended.handle.transactional_id,
                    )
        except TransactionNotAnswered as exc:
            raise CommitNotAcked(
                f"checkpoint {commit.checkpoint_id} of {commit.pipeline_id}: {exc}"
            ) from exc


__all__ = [
    "DEFAULT_LEADER_COMMIT_TIMEOUT_S",
    "CommitNotAcked",
    "LeaderCommitOutcome",
    "abort_from_leader",
    "commit_from_leader",
]
