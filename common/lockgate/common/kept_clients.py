"""Kafka clients kept open between uses: one set per cluster and properties.

Building a Kafka client costs a connection (TLS and SASL when the cluster is secured), a
bootstrap round trip and, for librdkafka, its threads. The checkpoint path asks small
questions often: each task's offset snapshot and topics check (the executor's metadata
consumers, ``offsets.py``), each handle's FindCoordinator and EndTxn (the commit path,
``kafka_transactions.py``). Built for each question, the client's setup was most of its
cost (README, issue 13). This is the one pool both keep their clients in.

A client is keyed by its cluster and its properties as written (secrets as references),
and rebuilt when they resolve to something else (a rotated secret); dropped after any
error in its use, so the next use starts afresh; closed once unused for ``idle_s``, or at
``close_all``; never while a thread uses it. ``shared`` clients serve several threads at
once (librdkafka's are safe to); otherwise each use has a client to itself (kafka-python's
network client is driven by the thread that polls it), and the pool builds another when
all are in use. Answers are never cached here: each question is still its own request.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from lockgate.common.kafka_config import resolve_properties

C = TypeVar("C")
_Key = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class _Kept(Generic[C]):
    resolved: dict[str, str]
    client: C
    users: int = 0
    last_used: float = 0.0
    retired: bool = False


class KeptClients(Generic[C]):
    """Kafka clients of type ``C`` kept open between uses (see module docstring)."""

    def __init__(
        self,
        factory: Callable[[str, Mapping[str, str]], C],
        *,
        close: Callable[[C], None],
        shared: bool,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``factory(bootstrap_servers, resolved properties)`` builds a client, ``close``
        closes one."""
        self._factory = factory
        self._close = close
        self._shared = shared
        self._idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[_Key, list[_Kept[C]]] = {}

    @contextlib.contextmanager
    def using(
        self,
        bootstrap_servers: str,
        properties: Mapping[str, str],
        *,
        resolved: Mapping[str, str] | None = None,
        keep_on: tuple[type[BaseException], ...] = (),
    ) -> Iterator[C]:
        """A client of the cluster for the duration of the block; dropped if the block
        fails, unless with one of ``keep_on`` (answers that say nothing against the
        client). ``properties`` as written; ``resolved``: already resolved from them (else
        resolved here, ``SecretReferenceError`` if one cannot be read)."""
        now_resolved = dict(resolve_properties(properties) if resolved is None else resolved)
        key = (bootstrap_servers, tuple(sorted(properties.items())))
        kept = self._acquire(key, bootstrap_servers, now_resolved)
        failed = False
        try:
            yield kept.client
        except keep_on:
            raise
        except BaseException:
            failed = True
            raise
        finally:
            self._release(key, kept, failed=failed)

    def _acquire(self, key: _Key, bootstrap: str, resolved: dict[str, str]) -> _Kept[C]:
        with self._lock:
            now = self._clock()
            for stale_key, kept_list in list(self._clients.items()):
                for stale in list(kept_list):
                    if stale.users == 0 and now - stale.last_used > self._idle_s:
                        self._retire(stale_key, stale)
            kept_list = self._clients.get(key, [])
            for rotated in [k for k in kept_list if k.resolved != resolved]:
                self._retire(key, rotated)
            kept_list = self._clients.get(key, [])
            free = [k for k in kept_list if self._shared or k.users == 0]
            if free:
                kept = free[0]
            else:
                kept = _Kept(resolved, self._factory(bootstrap, resolved))
                self._clients.setdefault(key, []).append(kept)
            kept.users += 1
            return kept

    def _release(self, key: _Key, kept: _Kept[C], *, failed: bool) -> None:
        with self._lock:
            kept.users -= 1
            kept.last_used = self._clock()
            if failed and not kept.retired:
                self._retire(key, kept)
            elif kept.retired and kept.users == 0:
                self._close(kept.client)

    def _retire(self, key: _Key, kept: _Kept[C]) -> None:
        # Under the lock. A client still in use is closed by its last user's release.
        kept_list = self._clients[key]
        kept_list.remove(kept)
        if not kept_list:
            del self._clients[key]
        kept.retired = True
        if kept.users == 0:
            self._close(kept.client)

    def close_all(self) -> None:
        """Close every client not in use now; those in use close when released."""
        with self._lock:
            for key, kept_list in list(self._clients.items()):
                for kept in list(kept_list):
                    self._retire(key, kept)


__all__ = ["KeptClients"]
