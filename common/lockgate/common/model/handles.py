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
