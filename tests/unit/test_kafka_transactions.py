"""Pure logic of lockgate.common.kafka_transactions: handles, error mapping, versions, wire.

No broker here: the broker-facing behaviour is proved in
tests/integration/test_kafka_transactions.py.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.producer import EndTxnRequest

from lockgate.common.kafka_resume_clients import ResumeClient
from lockgate.common.kafka_transactions import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    MAX_END_TXN_VERSION,
    NONE,
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    REQUEST_TIMED_OUT,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    EndTxnOutcome,
    InvalidTransactionStateError,
    ProducerFencedError,
    TransactionResumeError,
    UnknownTransactionError,
    _end_once,
    end_txn_outcome,
    end_txn_request,
    error_name,
)
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TransactionalId

HANDLE = TransactionHandle(
    transactional_id=TransactionalId("pipeline-7-task-3"), producer_id=42, producer_epoch=5
)


@given(
    tid=st.text(min_size=1, max_size=200),
    producer_id=st.integers(min_value=0, max_value=2**63 - 1),
    epoch=st.integers(min_value=0, max_value=32767),
)
def test_handle_json_round_trip(tid: str, producer_id: int, epoch: int) -> None:
    handle = TransactionHandle(
        transactional_id=TransactionalId(tid), producer_id=producer_id, producer_epoch=epoch
    )
    assert TransactionHandle.from_json(handle.to_json()) == handle


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"producer_id": 1, "producer_epoch": 0}', "'transactional_id'"),
        ('{"transactional_id": "", "producer_id": 1, "producer_epoch": 0}', "'transactional_id'"),
        ('{"transactional_id": "a", "producer_id": -1, "producer_epoch": 0}', "'producer_id'"),
        ('{"transactional_id": "a", "producer_id": "1", "producer_epoch": 0}', "'producer_id'"),
        (
            '{"transactional_id": "a", "producer_id": 1, "producer_epoch": 40000}',
            "'producer_epoch'",
        ),
        ('{"transactional_id": "a", "producer_id": 1, "producer_epoch": true}', "'producer_epoch'"),
    ],
)
def test_bad_handle_json_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TransactionHandle.from_json(text)


def test_success_is_done() -> None:
    assert end_txn_outcome(NONE, handle=HANDLE, verb="commit") is EndTxnOutcome.DONE


@pytest.mark.parametrize(
    "code", [REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS]
)
def test_transient_errors_retry_the_same_coordinator(code: int) -> None:
    assert end_txn_outcome(code, handle=HANDLE, verb="commit") is EndTxnOutcome.RETRY


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
def test_coordinator_moves_trigger_a_new_lookup(code: int) -> None:
    assert (
        end_txn_outcome(code, handle=HANDLE, verb="abort") is EndTxnOutcome.FIND_COORDINATOR_AGAIN
    )


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (PRODUCER_FENCED, ProducerFencedError),
        (INVALID_PRODUCER_EPOCH, ProducerFencedError),
        (INVALID_TXN_STATE, InvalidTransactionStateError),
        (INVALID_PRODUCER_ID_MAPPING, UnknownTransactionError),
        (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionResumeError),
        (9999, TransactionResumeError),
    ],
)
def test_final_errors_are_typed_and_name_the_transaction(
    code: int, error: type[TransactionResumeError]
) -> None:
    with pytest.raises(error) as info:
        end_txn_outcome(code, handle=HANDLE, verb="commit")
    assert info.value.error_code == code
    assert info.value.handle == HANDLE
    message = str(info.value)
    assert "pipeline-7-task-3" in message and "epoch 5" in message
    assert error_name(code) in message


def test_error_names() -> None:
    assert error_name(PRODUCER_FENCED) == "PRODUCER_FENCED"
    assert error_name(12345) == "UNKNOWN(12345)"


def test_end_txn_is_never_negotiated_above_version_4() -> None:
    # Kafka 4.x brokers offer EndTxn 0..5; version 5 would switch to KIP-890 epoch bumps.
    assert MAX_END_TXN_VERSION == 4
    request = end_txn_request(HANDLE, committed=True)
    offering = BrokerVersionData(api_versions={EndTxnRequest.API_KEY: (0, 5)})
    assert offering.api_version(request) == MAX_END_TXN_VERSION


def test_end_txn_v4_request_carries_the_handle() -> None:
    request = EndTxnRequest(
        transactional_id=HANDLE.transactional_id,
        producer_id=HANDLE.producer_id,
        producer_epoch=HANDLE.producer_epoch,
        committed=True,
    )
    encoded = request.encode(version=4)
    decoded = EndTxnRequest.decode(encoded, version=4)
    assert decoded.transactional_id == "pipeline-7-task-3"
    assert (decoded.producer_id, decoded.producer_epoch, decoded.committed) == (42, 5, True)


def test_handle_json_is_stable() -> None:
    assert json.loads(HANDLE.to_json()) == {
        "transactional_id": "pipeline-7-task-3",
        "producer_id": 42,
        "producer_epoch": 5,
    }


class _FakeCluster:
    def __init__(self) -> None:
        self.found = 0

    def add_coordinator(self, found: object, *_: object, **__: object) -> str:
        self.found += 1
        return f"coordinator-{self.found}"


class _FakeNet:
    """Answers FindCoordinator with a new node each time, and EndTxn with `end_txn_codes`
    in turn; records where each request went."""

    def __init__(self, end_txn_codes: list[int]) -> None:
        self.cluster = _FakeCluster()
        self.codes = list(end_txn_codes)
        self.sent: list[tuple[str, str]] = []

    def least_loaded_node(self, bootstrap_fallback: bool = False) -> str:
        return "bootstrap-0"

    def api_version(self, operation: object, max_version: int | None = None) -> int:
        return 4

    def send_and_receive(self, node: str, request: object, timeout_ms: int = 0) -> object:
        kind = "EndTxn" if isinstance(request, EndTxnRequest) else "FindCoordinator"
        self.sent.append((kind, node))
        if kind == "FindCoordinator":
            found = SimpleNamespace(error_code=NONE, error_message=None)
            return SimpleNamespace(coordinators=[found])
        return SimpleNamespace(error_code=self.codes.pop(0))


def _attempt(client: ResumeClient, handle: TransactionHandle) -> bool:
    done, _last, _code = _end_once(client, handle, True, time.monotonic() + 5, "commit")
    return done


def test_a_kept_client_asks_for_an_ids_coordinator_once_and_again_only_when_it_moved() -> None:
    """The commit path's kept clients (`kafka_resume_clients`) remember each transactional
    id's coordinator: the next commit on the id is one EndTxn; NOT_COORDINATOR forgets it,
    so the retry looks it up again instead of asking the old node forever."""
    handle = TransactionHandle(
        transactional_id=TransactionalId("p-t0-s1-0"), producer_id=7, producer_epoch=0
    )
    net = _FakeNet([NONE, NONE, NOT_COORDINATOR, NONE])
    client = ResumeClient(net)  # type: ignore[arg-type]

    assert _attempt(client, handle) and _attempt(client, handle)
    assert net.sent == [
        ("FindCoordinator", "bootstrap-0"),
        ("EndTxn", "coordinator-1"),
        ("EndTxn", "coordinator-1"),
    ]
    net.sent.clear()
    assert not _attempt(client, handle)  # the coordinator moved: NOT_COORDINATOR
    assert _attempt(client, handle)
    assert net.sent == [
        ("EndTxn", "coordinator-1"),
        ("FindCoordinator", "bootstrap-0"),
        ("EndTxn", "coordinator-2"),
    ]
