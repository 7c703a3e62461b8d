"""``transform.python`` targets that never return, for the shutdown tests.

Each one creates the file named by the value of the batch's first record once it is stuck,
so a test knows when to send its signal. The executor imports this module (the test puts
the repository on its ``PYTHONPATH``); Spark's Python workers cannot import ``tests.*``,
so what runs there is a local function, which cloudpickle ships by value.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import DataFrame


def stall_in_spark(frame: DataFrame) -> DataFrame:
    """A transform whose Spark tasks never end: the batch's driver thread blocks in py4j
    (the write job) until the job is cancelled."""

    def stall(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time
        from pathlib import Path

        for batch in batches:
            for value in batch.column("value").to_pylist():
                Path(value.decode()).touch()
            while True:
                time.sleep(1)
        yield from ()

    return frame.select("key", "value").mapInArrow(stall, "key binary, value binary")


def stall_in_driver(frame: DataFrame) -> DataFrame:
    """A transform that blocks the executor's own thread, outside any Spark job: nothing a
    cancellation reaches."""
    [first] = frame.select("value").limit(1).collect()
    Path(bytes(first.value).decode()).touch()
    threading.Event().wait()
    return frame
