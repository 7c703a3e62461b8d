"""The recorded answers of mutating calls (`store/request_store.py`, `herder/requests.py`)
against real databases: a SQLite file and a real PostgreSQL (`[sqlite]`, `[postgres]`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.coordinator.domain.errors import FencedError
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.requests import REQUEST_RETENTION_MS
from lockgate.coordinator.store import SqlStore, open_store
from tests.integration.coordinator.test_store import herder, lead

DAY = REQUEST_RETENTION_MS


@pytest.fixture
def open_stores(db_url: str) -> Iterator[Callable[[], SqlStore]]:
    """Stores on one database, each with its own engine (as separate replicas)."""
    opened: list[SqlStore] = []

    def open_one() -> SqlStore:
        opened.append(open_store(db_url))
        return opened[-1]

    yield open_one
    for store in opened:
        store.close()


def _record(store: SqlStore, fence: Fence, request_id: str, *, retention_ms: int = DAY) -> None:
    store.requests.record(
        fence=fence,
        request_id=request_id,
        method="CreatePipeline",
        request_hash="h-" + request_id,
        response=b"\x00answer of " + request_id.encode(),
        retention_ms=retention_ms,
    )


def test_a_recorded_answer_is_found_by_the_next_leader_and_a_fenced_one_records_nothing(
    open_stores: Callable[[], SqlStore],
) -> None:
    old_store, new_store = open_stores(), open_stores()
    old = lead(old_store, "c1")
    _record(old_store, old, "r1")
    assert old_store.requests.find(request_id="unknown", retention_ms=DAY) is None
    old_store.lease.release_lease(fence=old)  # not a short lease: it ran out mid-write
    new = lead(new_store, "c2")
    found = new_store.requests.find(request_id="r1", retention_ms=DAY)
    assert found is not None
    assert (found.method, found.request_hash) == ("CreatePipeline", "h-r1")
    assert found.response == b"\x00answer of r1", "bytes come back as they were recorded"
    with pytest.raises(FencedError):
        _record(old_store, old, "r2")
    assert new_store.requests.find(request_id="r2", retention_ms=DAY) is None
    _record(new_store, new, "r2")
    assert new_store.requests.find(request_id="r2", retention_ms=DAY) is not None


def test_records_past_the_retention_are_neither_replayed_nor_kept(
    open_stores: Callable[[], SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    _record(store, fence, "old")
    assert store.requests.find(request_id="old", retention_ms=0) is None, "too old to replay"
    # Recording the next answer prunes what is past the retention (0 ms here: all before it).
    _record(store, fence, "new", retention_ms=0)
    assert store.requests.find(request_id="old", retention_ms=DAY) is None
    assert store.requests.find(request_id="new", retention_ms=DAY) is not None


def test_the_leader_runs_a_call_once_per_request_id(open_stores: Callable[[], SqlStore]) -> None:
    store = open_stores()
    leader = herder(store, "c1", lease_ms=30_000)
    leader.lease_keeper.campaign()
    runs: list[int] = []

    def call() -> bytes:
        runs.append(1)
        return f"answer {len(runs)}".encode()

    def once(request_id: str, digest: str = "h", method: str = "CreatePipeline") -> bytes:
        return leader.requests.once(
            request_id=request_id, method=method, request_hash=digest, call=call
        )

    assert once("r1") == b"answer 1"
    assert once("r1") == b"answer 1", "the retry gets the first answer"
    assert len(runs) == 1
    assert once("") == b"answer 2" and once("") == b"answer 3", "no id: no deduplication"
    with pytest.raises(InvalidArgument, match="different CreatePipeline request"):
        once("r1", digest="other")
    with pytest.raises(InvalidArgument, match="already used for a CreatePipeline call"):
        once("r1", method="DeletePipeline")
    assert len(runs) == 3

    def refused() -> bytes:
        raise InvalidArgument.for_field("spec.name", "bad")

    with pytest.raises(InvalidArgument):
        leader.requests.once(
            request_id="r2", method="CreatePipeline", request_hash="h", call=refused
        )
    assert once("r2") == b"answer 4", "a refused call is not recorded: its retry runs again"
