"""A ``transform.python`` module no test executor allows: importing it is the failure
(``sys.modules`` shows whether it was), so the allow-list must be checked first."""

from __future__ import annotations

from pyspark.sql import DataFrame


def run(frame: DataFrame) -> DataFrame:
    """Would copy the batch, if it were ever allowed."""
    return frame
