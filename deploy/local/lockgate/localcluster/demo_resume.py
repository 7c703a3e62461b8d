"""``python -m lockgate.localcluster.demo_resume --bootstrap-servers 127.0.0.1:9092``.

The foundation demo: a process pre-commits a Kafka transaction and is SIGKILLed; this
process then commits that transaction from the recorded (transactional.id, producer id,
epoch) without ever calling ``init_transactions``, and a ``read_committed`` consumer sees the
dead process's records exactly once. It starts nothing itself: run ``make cluster-up``
first (``make demo`` runs the pipeline demo, ``lockgate.localcluster.demo``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from lockgate.common.kafka_transactions import TransactionResumeError, commit_transaction
from lockgate.common.model.handles import TransactionHandle
from lockgate.localcluster.kafka import (
    client_config,
    create_topic,
    is_broker_ready,
    read_visible,
)
from lockgate.localcluster.process import ProcessStartError, wait_until


def _say(step: str, text: str) -> None:
    print(f"[{step}] {text}", flush=True)


def visible_now(bootstrap_servers: str, topic: str, *, isolation_level: str) -> int:
    """How many records of partition 0 a consumer sees right now (reads up to its end)."""
    consumer = Consumer(
        client_config(
            bootstrap_servers,
            {
                "group.id": f"lockgate-demo-{uuid.uuid4().hex}",
                "isolation.level": isolation_level,
                "enable.auto.commit": False,
                # For read_committed, "the end" is the last stable offset: an open
                # transaction stops the reader before its first record.
                "enable.partition.eof": True,
            },
        )
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return count
                raise RuntimeError(f"reading {topic!r} failed: {error}")
            count += 1
        raise TimeoutError(f"{isolation_level} reader did not reach the end of {topic!r}")
    finally:
        consumer.close()


def _precommit_and_die(
    bootstrap_servers: str, *, topic: str, transactional_id: str, records: int
) -> tuple[TransactionHandle, int]:
    """Steps 1-2: process A pre-commits `records` records and is SIGKILLed; its handle and
    exit status."""
    with tempfile.TemporaryDirectory(prefix="lockgate-demo-") as scratch:
        handle_file = Path(scratch) / "handle.json"
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockgate.localcluster.precommit_child",
                "--bootstrap-servers",
                bootstrap_servers,
                "--topic",
                topic,
                "--transactional-id",
                transactional_id,
                "--records",
                str(records),
                "--handle-file",
                str(handle_file),
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_until(
                handle_file.exists,
                timeout_s=60,
                description="process A to pre-commit",
                abort_if=lambda: (
                    None
                    if child.poll() is None
                    else f"process A exited with code {child.returncode}"
                ),
            )
            handle = TransactionHandle.from_json(handle_file.read_text())
            _say(
                "2",
                f"process A (pid {child.pid}) opened a transaction, produced {records} records, "
                f"flushed, and recorded transactional.id={handle.transactional_id} "
                f"producer_id={handle.producer_id} epoch={handle.producer_epoch}",
            )
            os.kill(child.pid, signal.SIGKILL)
            code = child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=30)
    return handle, code


def run_demo(bootstrap_servers: str, *, records: int) -> int:
    """The resume-commit round trip, narrated. Returns the process exit code."""
    if not is_broker_ready(bootstrap_servers, timeout_s=5.0):
        print(
            f"error: no Kafka broker answers at {bootstrap_servers}; start one with "
            "`make cluster-up` (or pass --bootstrap-servers)",
            file=sys.stderr,
        )
        return 1
    topic = f"lockgate-demo-{uuid.uuid4().hex[:8]}"
    transactional_id = f"lockgate-demo-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap_servers, topic)
    _say("1", f"created topic {topic} on {bootstrap_servers}")

    handle, code = _precommit_and_die(
        bootstrap_servers, topic=topic, transactional_id=transactional_id, records=records
    )
    _say("3", f"process A killed with SIGKILL (exit status {code}); its transaction stays open")

    uncommitted = visible_now(bootstrap_servers, topic, isolation_level="read_uncommitted")
    committed = visible_now(bootstrap_servers, topic, isolation_level="read_committed")
    _say(
        "4", f"before commit: read_uncommitted sees {uncommitted}, read_committed sees {committed}"
    )

    began = time.monotonic()
    try:
        commit_transaction(bootstrap_servers=bootstrap_servers, handle=handle)
    except TransactionResumeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _say(
        "5",
        f"process B (pid {os.getpid()}) committed it with FindCoordinator + EndTxn, no "
        f"init_transactions, in {1000 * (time.monotonic() - began):.0f} ms",
    )

    seen = read_visible(bootstrap_servers, topic)
    copies = Counter(r.value for r in seen)
    duplicates = sum(n - 1 for n in copies.values())
    _say(
        "6",
        f"after commit: read_committed sees {len(seen)} records "
        f"({len(copies)} distinct, {duplicates} duplicates)",
    )

    commit_transaction(bootstrap_servers=bootstrap_servers, handle=handle)
    again = read_visible(bootstrap_servers, topic)
    _say("7", f"committing again is harmless: read_committed still sees {len(again)} records")

    ok = committed == 0 and len(seen) == records and duplicates == 0 and len(again) == records
    print(
        "resume-commit: OK, the dead process's records are visible exactly once"
        if ok
        else "resume-commit: FAILED (see the counts above)"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.localcluster.demo_resume",
        description="Commit a SIGKILLed process's Kafka transaction from another process.",
    )
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=10, help="records process A writes")
    args = parser.parse_args(argv)
    if args.records < 1:
        parser.error("--records must be >= 1")
    try:
        return run_demo(args.bootstrap_servers, records=args.records)
    except (ProcessStartError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
