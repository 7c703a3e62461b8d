"""Example Python transforms: `transform: {python: "lockgate.executor.examples.transforms:NAME"}`.

A transform takes the batch's DataFrame (key, value, topic, partition, offset, timestamp,
headers) and returns the DataFrame to write (a value column, optionally key, headers,
timestamp).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def upper_case_values(batch: DataFrame) -> DataFrame:
    """Each record with its value read as UTF-8 text and upper-cased; key and headers kept."""
    return batch.select(
        "key",
        F.upper(F.col("value").cast("string")).alias("value"),
        "headers",
        "topic",
        "partition",
        "offset",
    )
