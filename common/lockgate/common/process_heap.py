"""The service process's heap and Python's cyclic garbage collector."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect, then move every object alive now out of the cyclic collector's reach
    (`gc.freeze`): the imports, the server, and whatever the service built before serving
    (the leader's store and SQLAlchemy's tables, the executor's SparkSession and its Py4J
    plumbing). A full collection walks every object it tracks while holding the GIL, so
    each one paused every thread of the process: 50-120 ms in a coordinator or an
    executor, several times a minute while checkpoints run (README, Benchmarks, issue 14).
    Objects made since are collected as before, and a frozen object is still freed when
    its last reference goes; only a cycle of them that becomes garbage is never reclaimed."""
    gc.collect()
    gc.freeze()
