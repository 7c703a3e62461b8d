"""Kafka clients kept open between uses (``kept_clients.KeptClients``): one set per cluster
and properties, reused, rebuilt when a secret reference resolves to something else, dropped
after a failure, closed only when no thread uses them; shared by threads at once (the
executor's metadata consumers) or one user at a time (the commit path's network clients)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest

from lockgate.common.kept_clients import KeptClients


class FakeConsumer:
    def __init__(self, bootstrap: str, resolved: Mapping[str, str]) -> None:
        self.bootstrap = bootstrap
        self.resolved = dict(resolved)
        self.closed = False

    def close(self) -> None:
        assert not self.closed, "closed twice"
        self.closed = True


class Factory:
    def __init__(self) -> None:
        self.built: list[FakeConsumer] = []

    def __call__(self, bootstrap: str, resolved: Mapping[str, str]) -> FakeConsumer:
        consumer = FakeConsumer(bootstrap, resolved)
        self.built.append(consumer)
        return consumer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def clients(
    factory: Factory, clock: Clock | None = None, *, shared: bool = True
) -> KeptClients[FakeConsumer]:
    return KeptClients(
        factory, close=FakeConsumer.close, shared=shared, idle_s=60.0, clock=clock or Clock()
    )


def test_one_client_per_cluster_and_properties_is_reused_between_uses() -> None:
    factory = Factory()
    pool = clients(factory)
    with pool.using("k1:9092", {}) as first:
        pass
    with pool.using("k1:9092", {}) as again:
        pass
    with pool.using("k2:9092", {}) as other_cluster:
        pass
    with pool.using("k1:9092", {"security.protocol": "SSL"}) as other_properties:
        pass
    assert again is first and not first.closed
    assert len(factory.built) == 3
    assert other_cluster.bootstrap == "k2:9092"
    assert other_properties.resolved == {"security.protocol": "SSL"}


def test_a_reference_that_resolves_to_something_new_rebuilds_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    factory = Factory()
    pool = clients(factory)
    properties = {"sasl.password": "${env:LOCKGATE_TEST_ROTATED}"}
    monkeypatch.setenv("LOCKGATE_TEST_ROTATED", "old-secret")
    with pool.using("k1:9092", properties) as before:
        pass
    monkeypatch.setenv("LOCKGATE_TEST_ROTATED", "new-secret")
    with pool.using("k1:9092", properties) as after:
        pass
    assert after is not before and before.closed
    assert after.resolved == {"sasl.password": "new-secret"}


def test_a_failed_use_drops_the_client_and_the_next_use_builds_a_new_one() -> None:
    factory = Factory()
    pool = clients(factory)
    with pytest.raises(RuntimeError), pool.using("k1:9092", {}) as broken:
        raise RuntimeError("broker went away")
    assert broken.closed
    with pool.using("k1:9092", {}) as fresh:
        pass
    assert fresh is not broken and not fresh.closed


def test_a_client_in_use_is_never_closed_under_its_user() -> None:
    factory = Factory()
    pool = clients(factory)
    with pool.using("k1:9092", {}) as held:
        # Another thread's failure drops the client from the pool meanwhile...
        with pytest.raises(RuntimeError), pool.using("k1:9092", {}) as same:
            assert same is held
            raise RuntimeError("timed out")
        pool.close_all()
        assert not held.closed
    # ...and the last user's release closes it.
    assert held.closed
    with pool.using("k1:9092", {}) as replacement:
        pass
    assert replacement is not held


def test_a_client_unused_past_the_idle_time_is_closed_on_the_next_use_of_any() -> None:
    factory = Factory()
    clock = Clock()
    pool = clients(factory, clock)
    with pool.using("k1:9092", {}) as idle:
        pass
    clock.now = 59.0
    with pool.using("k2:9092", {}):
        pass
    assert not idle.closed
    clock.now = 61.0
    with pool.using("k2:9092", {}):
        pass
    assert idle.closed
    with pool.using("k1:9092", {}) as rebuilt:
        pass
    assert rebuilt is not idle


def test_close_all_closes_every_idle_client_once() -> None:
    factory = Factory()
    pool = clients(factory)
    for bootstrap in ("k1:9092", "k2:9092"):
        with pool.using(bootstrap, {}):
            pass
    pool.close_all()
    pool.close_all()
    assert [c.closed for c in factory.built] == [True, True]


def test_threads_using_one_cluster_at_once_share_one_client() -> None:
    factory = Factory()
    pool = clients(factory)
    inside = threading.Barrier(8, timeout=10)
    seen: list[FakeConsumer] = []

    def use() -> None:
        with pool.using("k1:9092", {}) as consumer:
            seen.append(consumer)
            inside.wait()  # all 8 hold the client at the same time

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(seen) == 8 and len(factory.built) == 1
    assert not factory.built[0].closed


def test_unshared_clients_serve_one_user_at_a_time_and_are_reused_once_free() -> None:
    factory = Factory()
    pool = clients(factory, shared=False)
    with pool.using("k1:9092", {}) as first, pool.using("k1:9092", {}) as second:
        assert second is not first
    with pool.using("k1:9092", {}) as again:
        assert again in (first, second)
    assert len(factory.built) == 2 and not any(c.closed for c in factory.built)


def test_an_unshared_clients_failure_drops_only_that_client() -> None:
    factory = Factory()
    pool = clients(factory, shared=False)
    with pool.using("k1:9092", {}) as healthy:
        with pytest.raises(RuntimeError), pool.using("k1:9092", {}) as broken:
            raise RuntimeError("connection reset")
        assert broken.closed and not healthy.closed
    with pool.using("k1:9092", {}) as next_use:
        assert next_use is healthy
    assert len(factory.built) == 2


def test_a_rotated_secret_retires_every_unshared_client_of_the_old_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    factory = Factory()
    pool = clients(factory, shared=False)
    properties = {"sasl.password": "${env:LOCKGATE_TEST_ROTATED}"}
    monkeypatch.setenv("LOCKGATE_TEST_ROTATED", "old-secret")
    with pool.using("k1:9092", properties) as a, pool.using("k1:9092", properties) as b:
        pass
    monkeypatch.setenv("LOCKGATE_TEST_ROTATED", "new-secret")
    with pool.using("k1:9092", properties) as after:
        assert after.resolved == {"sasl.password": "new-secret"}
    assert a.closed and b.closed and not after.closed


def test_already_resolved_properties_are_not_resolved_again() -> None:
    factory = Factory()
    pool = clients(factory, shared=False)
    written = {"sasl.password": "${env:LOCKGATE_TEST_NEVER_SET}"}
    with pool.using("k1:9092", written, resolved={"sasl.password": "given"}) as client:
        assert client.resolved == {"sasl.password": "given"}


def test_an_answer_named_in_keep_on_passes_through_and_keeps_the_client() -> None:
    factory = Factory()
    pool = clients(factory, shared=False)
    with (
        pytest.raises(LookupError),
        pool.using("k1:9092", {}, keep_on=(LookupError,)) as answered,
    ):
        raise LookupError("the broker's final answer: fenced")
    with pool.using("k1:9092", {}) as next_use:
        assert next_use is answered and not answered.closed
    with pytest.raises(RuntimeError), pool.using("k1:9092", {}, keep_on=(LookupError,)) as broken:
        raise RuntimeError("connection reset")
    assert broken.closed
