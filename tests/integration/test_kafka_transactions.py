"""The Kafka facts Lockgate's exactly-once sink rests on, proved on a real Kafka 4.x broker.

* read_committed sees exactly the committed transactions, read_uncommitted sees all;
* a transaction pre-committed by a process that is then SIGKILLed can be committed (or
  aborted) by another process from its (transactional.id, producer id, epoch) alone;
* that commit is idempotent, and a stale epoch or a contradicting end is a typed error.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.net.compat import KafkaNetClient

from lockgate.common import kafka_resume_clients
from lockgate.common.kafka_resume_clients import RESUME_CLIENTS
from lockgate.common.kafka_transactions import (
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
    InvalidTransactionStateError,
    ProducerFencedError,
    TransactionTimeoutError,
    UnknownTransactionError,
    abort_transaction,
    commit_handles,
    commit_transaction,
    open_transactional_producer,
)
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TransactionalId
from lockgate.localcluster.kafka import TRANSACTIONS_COMMAND, ConsumedRecord, read_visible
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.precommit_child import record_value
from tests.fixtures.kafka import KafkaBroker
from tests.support.processes import start_child
from tests.support.waits import wait_for

RECORDS = 25


def _values(records: list[ConsumedRecord]) -> list[bytes]:
    return sorted(r.value or b"" for r in records)


def _expected(transactional_id: str, count: int = RECORDS) -> list[bytes]:
    return sorted(record_value(transactional_id, i) for i in range(count))


@contextmanager
def _precommitted_then_killed(
    broker: KafkaBroker, topic: str, tmp_path: Path
) -> Iterator[TransactionHandle]:
    """Run process A (pre-commit, write handle), SIGKILL it once ready, yield the handle."""
    transactional_id = f"resume-{uuid.uuid4().hex[:10]}"
    handle_file = tmp_path / f"{transactional_id}.json"
    child = start_child(
        "process A",
        [
            sys.executable,
            "-m",
            "lockgate.localcluster.precommit_child",
            "--bootstrap-servers",
            broker.bootstrap_servers,
            "--topic",
            topic,
            "--transactional-id",
            transactional_id,
            "--records",
            str(RECORDS),
            "--handle-file",
            str(handle_file),
        ],
        log_path=tmp_path / f"{transactional_id}.log",
    )
    try:
        wait_for("process A to pre-commit", handle_file.exists, timeout_s=60, abort_if=child.died)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait_exit(timeout_s=30) == -signal.SIGKILL
        yield TransactionHandle.from_json(handle_file.read_text())
    finally:
        child.stop(grace_s=0)


def _open_transaction_start(broker: KafkaBroker, topic: str, producer_id: int) -> int:
    """The CurrentTransactionStartOffset of ``producer_id`` on partition 0 (-1: none open)."""
    result = broker.run_tool(
        TRANSACTIONS_COMMAND,
        "--bootstrap-server",
        broker.bootstrap_servers,
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
    )
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    header = lines[0]
    pid_col = header.index("ProducerId")
    start_col = header.index("CurrentTransactionStartOffset")
    for row in lines[1:]:
        if row and int(row[pid_col]) == producer_id:
            start = row[start_col]
            return -1 if start in ("None", "-1") else int(start)
    return -1


def test_read_committed_sees_committed_only(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    tid = f"commit-abort-{uuid.uuid4().hex[:10]}"
    wrapped = open_transactional_producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=tid
    )
    producer = wrapped.producer
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(30)

    committed = read_visible(kafka_broker.bootstrap_servers, topic)
    assert _values(committed) == sorted(f"committed-{i}".encode() for i in range(5))
    everything = read_visible(
        kafka_broker.bootstrap_servers, topic, isolation_level="read_uncommitted"
    )
    assert _values(everything) == sorted(
        [f"committed-{i}".encode() for i in range(5)] + [f"aborted-{i}".encode() for i in range(3)]
    )


def test_resume_commit(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic()
    with _precommitted_then_killed(kafka_broker, topic, tmp_path) as handle:
        # A is dead; its records are in the log but inside a transaction that is still open.
        assert _open_transaction_start(kafka_broker, topic, handle.producer_id) >= 0
        uncommitted = read_visible(
            kafka_broker.bootstrap_servers, topic, isolation_level="read_uncommitted"
        )
        assert _values(uncommitted) == _expected(handle.transactional_id)

        commit_transaction(bootstrap_servers=kafka_broker.bootstrap_servers, handle=handle)

        seen = read_visible(kafka_broker.bootstrap_servers, topic)
        assert _values(seen) == _expected(handle.transactional_id)  # each record exactly once
        assert _open_transaction_start(kafka_broker, topic, handle.producer_id) == -1

        hanging = kafka_broker.run_tool(
            TRANSACTIONS_COMMAND,
            "--bootstrap-server",
            kafka_broker.bootstrap_servers,
            "find-hanging",
            "--broker-id",
            "1",
            "--max-transaction-timeout",
            "0",
        )
        assert hanging.returncode == 0, hanging.stderr
        assert topic not in hanging.stdout
        listing = kafka_broker.run_tool(
            TRANSACTIONS_COMMAND, "--bootstrap-server", kafka_broker.bootstrap_servers, "list"
        )
        row = next(
            line.split() for line in listing.stdout.splitlines() if handle.transactional_id in line
        )
        assert row[3] == "CompleteCommit"


def test_resume_abort(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic()
    with _precommitted_then_killed(kafka_broker, topic, tmp_path) as handle:
        abort_transaction(bootstrap_servers=kafka_broker.bootstrap_servers, handle=handle)

        assert read_visible(kafka_broker.bootstrap_servers, topic) == []
        # The records were written (read_uncommitted sees them): the abort hid them.
        uncommitted = read_visible(
            kafka_broker.bootstrap_servers, topic, isolation_level="read_uncommitted"
        )
        assert _values(uncommitted) == _expected(handle.transactional_id)
        assert _open_transaction_start(kafka_broker, topic, handle.producer_id) == -1


def test_resume_commit_is_idempotent_and_refuses_abort_after_commit(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic()
    bootstrap = kafka_broker.bootstrap_servers
    with _precommitted_then_killed(kafka_broker, topic, tmp_path) as handle:
        commit_transaction(bootstrap_servers=bootstrap, handle=handle)
        commit_transaction(bootstrap_servers=bootstrap, handle=handle)  # a retried commit

        with pytest.raises(InvalidTransactionStateError) as info:
            abort_transaction(bootstrap_servers=bootstrap, handle=handle)
        assert info.value.error_code == INVALID_TXN_STATE
        assert handle.transactional_id in str(info.value)

        assert _values(read_visible(bootstrap, topic)) == _expected(handle.transactional_id)


def test_resume_abort_is_idempotent_and_refuses_commit_after_abort(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic()
    bootstrap = kafka_broker.bootstrap_servers
    with _precommitted_then_killed(kafka_broker, topic, tmp_path) as handle:
        abort_transaction(bootstrap_servers=bootstrap, handle=handle)
        abort_transaction(bootstrap_servers=bootstrap, handle=handle)

        with pytest.raises(InvalidTransactionStateError):
            commit_transaction(bootstrap_servers=bootstrap, handle=handle)
        assert read_visible(bootstrap, topic) == []


def test_resume_commit_with_stale_epoch_is_fenced(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic()
    bootstrap = kafka_broker.bootstrap_servers
    with _precommitted_then_killed(kafka_broker, topic, tmp_path) as old:
        # A new producer of the same id (e.g. a Spark retry of the task slot) fences A:
        # init_transactions aborts A's open transaction and bumps the epoch.
        newer = open_transactional_producer(
            bootstrap_servers=bootstrap, transactional_id=old.transactional_id
        )
        newer_handle = newer.current_handle()
        assert newer_handle.producer_id == old.producer_id
        assert newer_handle.producer_epoch > old.producer_epoch

        with pytest.raises(ProducerFencedError) as info:
            commit_transaction(bootstrap_servers=bootstrap, handle=old)
        assert info.value.error_code == PRODUCER_FENCED
        assert f"epoch {old.producer_epoch}" in str(info.value)
        assert read_visible(bootstrap, topic) == []
        newer.release_without_abort()


def test_commit_of_unknown_transactional_id_is_a_clear_error(kafka_broker: KafkaBroker) -> None:
    handle = TransactionHandle(
        transactional_id=TransactionalId(f"never-used-{uuid.uuid4().hex}"),
        producer_id=123456,
        producer_epoch=0,
    )
    with pytest.raises(UnknownTransactionError) as info:
        commit_transaction(bootstrap_servers=kafka_broker.bootstrap_servers, handle=handle)
    assert info.value.error_code == INVALID_PRODUCER_ID_MAPPING


def test_commit_against_unreachable_broker_times_out_with_last_error() -> None:
    handle = TransactionHandle(
        transactional_id=TransactionalId("any"), producer_id=1, producer_epoch=0
    )
    with pytest.raises(TransactionTimeoutError) as info:
        commit_transaction(
            bootstrap_servers=f"127.0.0.1:{free_port()}", handle=handle, timeout_s=1.0
        )
    assert "no bootstrap server answered" in str(info.value)


def test_closing_a_precommitted_producer_aborts_but_releasing_does_not(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    """Why release_without_abort exists: Producer.close() aborts the open transaction."""
    topic = new_topic()
    bootstrap = kafka_broker.bootstrap_servers
    handles = []
    for how in ("close", "release"):
        tid = f"{how}-{uuid.uuid4().hex[:10]}"
        wrapped = open_transactional_producer(bootstrap_servers=bootstrap, transactional_id=tid)
        wrapped.producer.begin_transaction()
        wrapped.producer.produce(topic, value=f"{how}".encode())
        handle = wrapped.precommit()
        if how == "close":
            wrapped.producer.close()
        wrapped.release_without_abort()
        handles.append(handle)

    closed, released = handles
    with pytest.raises(InvalidTransactionStateError):
        commit_transaction(bootstrap_servers=bootstrap, handle=closed)
    commit_transaction(bootstrap_servers=bootstrap, handle=released)
    assert _values(read_visible(bootstrap, topic)) == [b"release"]


def test_read_visible_hides_its_sentinels(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    """read_visible's sentinels never show up in results, even those of earlier calls."""
    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce(topic, value=b"plain")
    assert producer.flush(30) == 0
    assert _values(read_visible(kafka_broker.bootstrap_servers, topic)) == [b"plain"]
    assert _values(read_visible(kafka_broker.bootstrap_servers, topic)) == [b"plain"]


def test_released_producers_are_freed_and_their_transactions_survive(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    """A long-lived executor pre-commits many times: released producers must not pile up."""
    topic = new_topic()
    bootstrap = kafka_broker.bootstrap_servers

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    gc.collect()
    before = threads()
    handles = []
    for i in range(4):
        wrapped = open_transactional_producer(
            bootstrap_servers=bootstrap, transactional_id=f"slot-{i}-{uuid.uuid4().hex[:8]}"
        )
        wrapped.producer.begin_transaction()
        wrapped.producer.produce(topic, value=f"batch-{i}".encode())
        handles.append(wrapped.precommit())
        wrapped.release_without_abort()
        del wrapped
        gc.collect()
    assert threads() <= before  # librdkafka's threads went away with each producer

    for handle in handles:
        commit_transaction(bootstrap_servers=bootstrap, handle=handle)
    assert _values(read_visible(bootstrap, topic)) == [f"batch-{i}".encode() for i in range(4)]


def _precommitted(bootstrap: str, topic: str, how_many: int) -> list[TransactionHandle]:
    handles = []
    for i in range(how_many):
        wrapped = open_transactional_producer(
            bootstrap_servers=bootstrap, transactional_id=f"kept-{i}-{uuid.uuid4().hex[:8]}"
        )
        wrapped.producer.begin_transaction()
        wrapped.producer.produce(topic, value=f"kept-{i}".encode())
        handles.append(wrapped.precommit().on(bootstrap))
        wrapped.release_without_abort()
    return handles


def test_commits_on_one_cluster_reuse_one_kept_open_client_and_survive_its_connections_closing(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit path keeps its network client open between commits (RESUME_CLIENTS):
    a second commit builds no client; one whose connections dropped under it (the broker
    closed them, or restarted) is replaced and the commit still lands."""
    topic = new_topic()
    bootstrap = kafka_broker.bootstrap_servers
    built: list[KafkaNetClient] = []

    class CountingClient(KafkaNetClient):  # type: ignore[misc]
        def __init__(self, **configs: object) -> None:
            super().__init__(**configs)
            built.append(self)

    monkeypatch.setattr(kafka_resume_clients, "KafkaNetClient", CountingClient)
    RESUME_CLIENTS.close_all()
    first, second, third = _precommitted(bootstrap, topic, 3)

    assert [e.refused for e in commit_handles([first], timeout_s=30, properties={})] == [None]
    assert [e.refused for e in commit_handles([second], timeout_s=30, properties={})] == [None]
    assert len(built) == 1

    for broker in built[0].cluster.brokers():  # the kept client's connections drop
        built[0].close(broker.node_id)
    assert [e.refused for e in commit_handles([third], timeout_s=30, properties={})] == [None]
    assert _values(read_visible(bootstrap, topic)) == [b"kept-0", b"kept-1", b"kept-2"]
    RESUME_CLIENTS.close_all()
