"""A Kafka transaction left open, as a pre-commit's write partition leaves it: the one way
tests make one (the test then commits, aborts or fences it)."""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence

from lockgate.common.kafka_transactions import open_transactional_producer
from lockgate.common.model.handles import TransactionHandle


def left_open(
    bootstrap_servers: str,
    topic: str,
    values: Sequence[bytes],
    *,
    transactional_id: str,
    config: Mapping[str, str] | None = None,
    partition: int | None = 0,
) -> TransactionHandle:
    """Write ``values`` to ``topic`` (``partition``; None: the partitioner's choice) in a
    transaction of ``transactional_id`` left open, and let the producer go without
    aborting it; returns its handle on ``bootstrap_servers``."""
    txn = open_transactional_producer(
        bootstrap_servers=bootstrap_servers,
        transactional_id=transactional_id,
        config=dict(config or {}),
    )
    txn.producer.begin_transaction()
    for value in values:
        if partition is None:
            txn.producer.produce(topic, value=value)
        else:
            txn.producer.produce(topic, value=value, partition=partition)
    handle = txn.precommit()
    txn.release_without_abort()
    del txn
    gc.collect()  # the released producer is freed now, not at some later test's collection
    return handle.on(bootstrap_servers)
