"""A prepared Kafka transaction: what another process needs to commit or abort it.

One type for the whole protocol (DESIGN.md, "Kafka facts that shape the sink"): the
executor's pre-commit reports it, the coordinator stores it in the COMPLETE checkpoint and
sends it back in CommitCheckpoint and AbortCheckpoint, and `lockgate.common
.kafka_transactions` ends it with `EndTxn(transactional_id, producer_id, epoch)`.

`producer_id`/`producer_epoch` are None for a transaction whose pre-commit was never
reported: it cannot be resumed, only aborted by re-initialising its id (which fences every
producer on it). `bootstrap_servers` is the sink cluster; the coordinator does not store it
with the handle (it is the pipeline's), and sets it when it sends the handle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from lockgate.common.model.ids import TransactionalId

MAX_PRODUCER_EPOCH = 32767
"""Kafka's producer epoch is an int16."""


@dataclass(frozen=True)
class TransactionHandle:
    """One prepared (pre-committed) Kafka transaction."""

    transactional_id: TransactionalId
    producer_id: int | None = None
    producer_epoch: int | None = None
    bootstrap_servers: str = ""

    def __post_init__(self) -> None:
        if not self.transactional_id:
            raise ValueError("a transaction handle needs its transactional_id")
        if (self.producer_id is None) != (self.producer_epoch is None):
            raise ValueError(
                f"transaction {self.transactional_id!r}: producer id and epoch go together "
                f"(got id {self.producer_id}, epoch {self.producer_epoch})"
            )
        if self.producer_id is not None and self.producer_id < 0:
            raise ValueError(f"producer_id must be >= 0, got {self.producer_id}")
        if self.producer_epoch is not None and not 0 <= self.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise ValueError(
                f"producer_epoch must be 0..{MAX_PRODUCER_EPOCH}, got {self.producer_epoch}"
            )

    @property
    def resumable(self) -> bool:
        """Whether EndTxn can end it from any process (its producer id and epoch are known)."""
        return self.producer_id is not None

    def on(self, bootstrap_servers: str) -> TransactionHandle:
        """The same handle, naming the sink cluster it lives on."""
        return replace(self, bootstrap_servers=bootstrap_servers)

    def to_json(self) -> str:
        """The handle as a JSON object (a file another process resumes it from)."""
        raw: dict[str, object] = {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
        }
        if self.bootstrap_servers:
            raw["bootstrap_servers"] = self.bootstrap_servers
        return json.dumps(raw, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransactionHandle:
        """Parse what `to_json` wrote of a resumable handle; ValueError names the bad field."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"transaction handle is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError("transaction handle must be a JSON object")
        tid, pid, epoch = (
            raw.get("transactional_id"),
            raw.get("producer_id"),
            raw.get("producer_epoch"),
        )
        servers = raw.get("bootstrap_servers", "")
        if not isinstance(tid, str) or not tid:
            raise ValueError(
                "transaction handle field 'transactional_id' must be a non-empty string"
            )
        if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
            raise ValueError("transaction handle field 'producer_id' must be an integer >= 0")
        if (
            not isinstance(epoch, int)
            or isinstance(epoch, bool)
            or not 0 <= epoch <= MAX_PRODUCER_EPOCH
        ):
            raise ValueError(
                "transaction handle field 'producer_epoch' must be an integer "
                f"0..{MAX_PRODUCER_EPOCH}"
            )
        if not isinstance(servers, str):
            raise ValueError("transaction handle field 'bootstrap_servers' must be a string")
        return cls(TransactionalId(tid), pid, epoch, servers)
