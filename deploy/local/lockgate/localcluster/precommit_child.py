"""A process that pre-commits one Kafka transaction and then waits to be killed.

``python -m lockgate.localcluster.precommit_child --bootstrap-servers H:P --topic T
--transactional-id ID --records N --handle-file F`` opens a transactional producer, produces
``N`` records (values ``<ID>:<i>``) inside one transaction, flushes, writes the
:class:`~lockgate.common.model.handles.TransactionHandle` as JSON to ``F`` (atomically:
the file appears complete or not at all) and then blocks until a signal ends it. The resume
tests and the demo SIGKILL it at that point, as a crash right after pre-commit.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from lockgate.common.kafka_transactions import open_transactional_producer


def record_value(transactional_id: str, index: int) -> bytes:
    """The value of record ``index`` written under ``transactional_id``."""
    return f"{transactional_id}:{index}".encode()


def main(argv: list[str] | None = None) -> int:
    """Pre-commit, write the handle file, block until killed."""
    parser = argparse.ArgumentParser(prog="python -m lockgate.localcluster.precommit_child")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--handle-file", type=Path, required=True)
    parser.add_argument("--transaction-timeout-ms", type=int, default=300_000)
    args = parser.parse_args(argv)
    if args.records < 1:
        parser.error("--records must be >= 1")

    producer = open_transactional_producer(
        bootstrap_servers=args.bootstrap_servers,
        transactional_id=args.transactional_id,
        transaction_timeout_ms=args.transaction_timeout_ms,
    )
    producer.producer.begin_transaction()
    for index in range(args.records):
        producer.producer.produce(
            args.topic, key=str(index).encode(), value=record_value(args.transactional_id, index)
        )
    handle = producer.precommit()
    tmp = args.handle_file.with_suffix(".tmp")
    tmp.write_text(handle.to_json())
    tmp.replace(args.handle_file)
    print(f"pre-committed {args.records} records: {handle.to_json()}", flush=True)
    # Wait for the SIGKILL. If we get SIGTERM instead, leave without close(): close() would
    # abort the transaction, and the point of this process is to leave it open.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
