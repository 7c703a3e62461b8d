"""Transforms run only what the executor allows, on the executor's own SparkSession: Python
from allowed modules only (checked before importing), SQL over its own batch's views only."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lockgate.common.model.pipeline_spec import (
    PipelineSpec,
    RecordFormat,
    Transform,
    parse_pipeline_spec,
)
from lockgate.executor.dataplane.spark.batch import BatchOptions
from lockgate.executor.dataplane.spark.kafka_source import source_schema
from lockgate.executor.dataplane.spark.transform import apply_transform
from lockgate.executor.errors import TransformError
from tests.integration.executor_dataplane.conftest import produce
from tests.integration.executor_dataplane.test_precommit_batch import (
    _abort,
    _prefix,
    _ranges,
    _run,
)

pytestmark = pytest.mark.spark

#: A module this test never allows (it exists: importing it would put it in sys.modules).
UNALLOWED = "tests.integration.executor_dataplane.unallowed_transform"


def _spec(bootstrap: str, topics: list[str], sink: str, transform: dict[str, str]) -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": "limits",
            "source": {"kafka": {"bootstrap_servers": bootstrap, "topics": topics}},
            "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink}},
            "transform": transform,
        }
    )


def _batch(spark: SparkSession, spec: PipelineSpec, bootstrap: str, **options: Any) -> Any:
    ranges = _ranges(bootstrap, spec.source.topics[0])
    return _run(spark, spec, ranges, _prefix(), options=BatchOptions(**options))


def test_a_python_transform_runs_only_from_an_allowed_module(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    produce(bootstrap, source, [(b"k", b"abc")])

    refused = _spec(bootstrap, [source], sink, {"python": f"{UNALLOWED}:run"})
    with pytest.raises(TransformError) as caught:
        _batch(spark, refused, bootstrap, allowed_transform_modules=("tests.integration.other",))
    message = str(caught.value)
    assert f"module {UNALLOWED!r} is not allowed on this executor" in message
    assert f"--allow-transform-module {UNALLOWED}" in message
    assert UNALLOWED not in sys.modules  # checked before importing: none of its code ran

    # The project's examples run on every executor, with no flag.
    example = _spec(
        bootstrap,
        [source],
        sink,
        {"python": "lockgate.executor.examples.transforms:upper_case_values"},
    )
    result = _batch(spark, example, bootstrap)
    assert (result.records_in, result.records_out) == (1, 1)
    _abort(bootstrap, result)


def _frame(spark: SparkSession, topic: str, value: str) -> Any:
    """A one-record batch of `topic`, as the Kafka source gives it (bytes key and value)."""
    schema = source_schema(RecordFormat.BYTES, RecordFormat.BYTES, marked=False)
    return spark.createDataFrame([(b"k", value.encode(), topic, 0, 0, None, None)], schema)


def test_a_sql_transform_sees_only_its_own_batchs_views(spark: SparkSession) -> None:
    orders = _spec("127.0.0.1:1", ["orders_a"], "out", {"sql": "SELECT value FROM orders_a"})
    rows = apply_transform(spark, orders, _frame(spark, "orders_a", "secret")).collect()
    assert [bytes(r.value) for r in rows] == [b"secret"]
    # The batch's views are gone once its query is analysed ...
    assert [t.name for t in spark.catalog.listTables() if t.isTemporary] == []

    # ... and another pipeline naming them is refused before Spark resolves anything.
    spy = _spec(
        "127.0.0.1:1",
        ["clicks"],
        "out",
        {"sql": "SELECT value FROM clicks UNION ALL SELECT value FROM orders_a"},
    )
    with pytest.raises(TransformError, match=r"reads `orders_a`, which is not one of its batch's"):
        apply_transform(spark, spy, _frame(spark, "clicks", "mine"))


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        (
            "SELECT CAST(value AS BINARY) AS value FROM text.`/etc/passwd`",
            r"reads `text`.`/etc/passwd`, which is not one of its batch's views",
        ),
        (
            "WITH x AS (SELECT value FROM parquet.`/tmp`) SELECT value FROM input",
            r"reads `parquet`.`/tmp`",
        ),
        (
            "SELECT value FROM input WHERE key IN (SELECT key FROM other_pipeline_topic)",
            r"reads `other_pipeline_topic`",
        ),
        ("SET spark.sql.runSQLOnFiles=true", r"is a SetCommand, not a query"),
        ("SELECT (value FROM input", r"transform.sql failed: \s*\[PARSE_SYNTAX_ERROR\]"),
        ("INSERT INTO t SELECT value FROM input", r"is a InsertIntoStatement, not a query"),
    ],
)
def test_spark_parser_refuses_what_the_spec_parser_would_have(
    spark: SparkSession, sql: str, error: str
) -> None:
    """An executor runs specs its own parser accepted; these forms are refused there too
    (test_sql_transform.py), so the spec is forged here to reach Spark's parser."""
    spec = _spec("127.0.0.1:1", ["input_t"], "out", {"sql": "SELECT value FROM input"})
    forged = dataclasses.replace(spec, transform=Transform(sql=sql, python=None))
    with pytest.raises(TransformError, match=error):
        apply_transform(spark, forged, _frame(spark, "input_t", "v"))
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"
