"""`sink.kafka.compression` (and its sibling batching fields) reach the producers: the
broker's log holds the record batches a pipeline's checkpoint wrote, compressed as asked."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.executor.committer import Committer
from lockgate.executor.dataplane.spark.batch import run_precommit_batch
from lockgate.executor.dataplane.spark.offsets import snapshot_offset_ranges
from tests.integration.executor_dataplane.conftest import produce, read_topic
from tests.support.waits import wait_for

pytestmark = pytest.mark.spark

# Kafka's record batch: the attributes' low three bits are its codec, bit 5 marks a control
# batch (a transaction marker, never compressed).
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CONTROL = 0x20


def batch_codecs(partition_dir: Path) -> list[str]:
    """The codec of every data record batch in a partition's log segments, in order."""
    codecs: list[str] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data, pos = segment.read_bytes(), 0
        while pos + 23 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0:
                break
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            if not attributes & _CONTROL:
                codecs.append(_CODECS[attributes & 0x07])
            pos += 12 + length
    return codecs


def _copy(spark: SparkSession, bootstrap: str, source: str, sink: str, **batching: Any) -> None:
    """One checkpoint of a copy pipeline with `batching` under sink.kafka, committed."""
    spec = parse_pipeline_spec(
        {
            "name": "copy",
            "source": {"kafka": {"bootstrap_servers": bootstrap, "topics": [source]}},
            "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink, **batching}},
        }
    )
    result = run_precommit_batch(
        spark,
        spec,
        pipeline=PipelineId(spec.name),
        task=TaskId("copy/0"),
        checkpoint_id=CheckpointId(1),
        offset_ranges=snapshot_offset_ranges(
            bootstrap_servers=bootstrap, topics=[source], start_offsets={}
        ),
        transactional_id_prefix=f"lockgate-test-{uuid.uuid4().hex[:8]}",
    )
    Committer().commit(
        [h.on(bootstrap) for h in result.handles], what="test commit", sink_properties={}
    )


def _committed(bootstrap: str, sink: str, expected: int) -> list[Any]:
    """Wait until `expected` records of `sink` are visible to read_committed; return them."""

    def visible() -> list[Any] | None:
        records = read_topic(bootstrap, sink, partitions=1)
        return records if len(records) >= expected else None

    return wait_for(f"{expected} committed records in {sink}", visible, timeout_s=30)


def test_a_pipeline_compression_reaches_the_broker_log_and_the_default_is_none(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source = new_topic(partitions=1, prefix="in")
    records = [(f"k{i % 10}".encode(), b"x" * 100) for i in range(2_000)]
    produce(bootstrap, source, records)
    data_dir = kafka_broker.config.data_dir
    for batching, codec in (({"compression": "lz4", "linger_ms": 0}, "lz4"), ({}, "none")):
        sink = new_topic(partitions=1, prefix="out")
        _copy(spark, bootstrap, source, sink, **batching)
        output = _committed(bootstrap, sink, 2_000)
        assert sorted((r.key, r.value) for r in output) == sorted(records)
        codecs = batch_codecs(data_dir / f"{sink}-0")
        assert codecs and set(codecs) == {codec}, (batching, codecs)
