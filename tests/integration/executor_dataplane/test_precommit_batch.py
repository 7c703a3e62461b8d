"""One checkpoint's pre-commit batch: invisible until committed, exactly once after."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.executor.committer import Committer, HandleLostError
from lockgate.executor.dataplane.spark import chained
from lockgate.executor.dataplane.spark.batch import (
    BatchOptions,
    PrecommitResult,
    prepare_sink_frame,
    run_precommit_batch,
)
from lockgate.executor.dataplane.spark.chained import chained_columns, copy_partition
from lockgate.executor.dataplane.spark.kafka_sink import (
    ERROR_HEADER_OFFSET,
    ERROR_HEADER_PARTITION,
    ERROR_HEADER_REASON,
    ERROR_HEADER_TOPIC,
    SinkOptions,
)
from lockgate.executor.dataplane.spark.kafka_source import (
    SourceOptions,
    ranges_to_option,
    source_schema,
)
from lockgate.executor.dataplane.spark.offsets import snapshot_offset_ranges
from lockgate.executor.dataplane.spark.session import task_slots
from lockgate.executor.dataplane.spark.transform import apply_transform
from lockgate.executor.errors import RecordError, SinkError, SourceError, TransformError
from tests.fixtures.kafka import stable_end_offsets
from tests.fixtures.schema_registry import RegistryProcess
from tests.integration.executor_dataplane.conftest import (
    produce,
    produce_transaction,
    read_topic,
)
from tests.support.waits import wait_for

pytestmark = pytest.mark.spark

KEYS = 10
# This module's functions are the Python transforms of the tests below.
_OPTIONS = BatchOptions(allowed_transform_modules=(__name__,))


def _spec(bootstrap: str, source: str, sink: str, **extra: Any) -> PipelineSpec:
    raw: dict[str, Any] = {
        "name": "copy",
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topics": [source]}},
        "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink}},
    }
    for key, value in extra.items():
        if key in ("source_kafka", "sink_kafka"):
            raw[key.split("_")[0]]["kafka"].update(value)
        else:
            raw[key] = value
    return parse_pipeline_spec(raw)


def _seed(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    """Keyed records k0..k9 with a per-key sequence number in the value."""
    records = [(f"k{i % KEYS}".encode(), f"{i % KEYS}:{i // KEYS}".encode()) for i in range(count)]
    produce(bootstrap, topic, records)
    return records


def _ranges(
    bootstrap: str, topic: str, *, start_offsets: dict[tuple[str, int], int] | None = None
) -> list[OffsetRange]:
    return snapshot_offset_ranges(
        bootstrap_servers=bootstrap, topics=[topic], start_offsets=start_offsets or {}
    )


def _run(
    spark: SparkSession,
    spec: PipelineSpec,
    ranges: list[OffsetRange],
    prefix: str,
    *,
    options: BatchOptions = _OPTIONS,
) -> PrecommitResult:
    return run_precommit_batch(
        spark,
        spec,
        pipeline=PipelineId(spec.name),
        task=TaskId("t0"),
        checkpoint_id=CheckpointId(1),
        offset_ranges=ranges,
        transactional_id_prefix=prefix,
        options=options,
    )


def _kafka_handles(bootstrap: str, result: PrecommitResult) -> list[TransactionHandle]:
    """The batch's handles as the runtime reports them and the committer ends them."""
    return [h.on(bootstrap) for h in result.handles]


def _commit(bootstrap: str, result: PrecommitResult, *, timeout_s: float = 30.0) -> None:
    Committer(timeout_s=timeout_s).commit(
        _kafka_handles(bootstrap, result), what="test commit", sink_properties={}
    )


def _abort(bootstrap: str, result: PrecommitResult) -> None:
    Committer().abort(_kafka_handles(bootstrap, result), what="test abort", sink_properties={})


def _prefix() -> str:
    return f"lockgate-test-{uuid.uuid4().hex[:8]}"


def _wait_visible(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Any]:
    """Commit markers are written asynchronously after EndTxn returns: wait until at least
    ``expected`` records are visible to a read_committed reader, and return them all."""

    def visible() -> list[Any] | None:
        records = read_topic(bootstrap, topic, partitions=partitions)
        return records if len(records) >= expected else None

    return wait_for(f"{expected} committed records in {topic}", visible, timeout_s=30)


def _assert_once_in_key_order(output: list[Any], records: list[tuple[bytes, bytes]]) -> None:
    """Every seeded record (`_seed`) once, and each key's sequence numbers in order."""
    assert sorted((r.key, r.value) for r in output) == sorted(records)
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for record in output:
        assert record.key is not None and record.value is not None
        by_key[record.key].append(int(record.value.split(b":")[1]))
    assert all(seq == sorted(seq) for seq in by_key.values()), "per-key order broken"


def test_precommit_invisible_until_commit_then_exactly_once_in_key_order(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2, prefix="in"), new_topic(partitions=3, prefix="out")
    records = _seed(bootstrap, source, 2000)
    spec = _spec(
        bootstrap, source, sink, transform={"sql": "SELECT key, value, headers FROM input"}
    )

    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())

    assert (result.records_in, result.records_out, result.dead_lettered) == (2000, 2000, 0)
    # The two small ranges are packed into one write partition: one transaction.
    assert len(result.handles) == 1
    # Pre-committed: in the log, invisible to read_committed readers.
    assert len(read_topic(bootstrap, sink, partitions=3, committed=False)) == 2000
    assert read_topic(bootstrap, sink, partitions=3) == []

    _commit(bootstrap, result)
    _commit(bootstrap, result)  # idempotent

    output = _wait_visible(bootstrap, sink, 3, 2000)
    _assert_once_in_key_order(output, records)
    # Keys are partitioned with murmur2 like the Java client: one output partition per key.
    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    for record in output:
        partitions_of_key[record.key].add(record.partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())


def test_a_batch_of_more_ranges_than_task_slots_runs_one_task_per_slot_and_copies_once(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """Ranges too large to pack (over `pack_offsets_per_partition`) are spread over the
    session's slots, each whole: 2 write partitions and transactions for 3 ranges."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=4, prefix="in"), new_topic(partitions=2, prefix="out")
    records = _seed(bootstrap, source, 800)
    spec = _spec(bootstrap, source, sink)
    slots = task_slots(spark)
    assert slots == 2, "the fixture's session is local[2,2]"
    ranges = _ranges(bootstrap, source)
    filled = [r for r in ranges if r.size > 0]
    # Keys k0..k9 fall on 3 of the 4 partitions (murmur2): 400, 320 and 80 records, more
    # ranges than slots, none small enough to pack with another.
    assert len(filled) > slots and all(r.size > 50 for r in filled), filled
    options = dataclasses.replace(_OPTIONS, pack_offsets_per_partition=50)

    capped = _run(
        spark,
        spec,
        ranges,
        _prefix(),
        options=dataclasses.replace(options, max_packed_partitions=slots),
    )

    assert (capped.records_in, capped.records_out) == (800, 800)
    assert len(capped.handles) == 2
    _commit(bootstrap, capped)
    output = _wait_visible(bootstrap, sink, 2, 800)
    _assert_once_in_key_order(output, records)
    # Without the cap, one write partition per range.
    uncapped = _run(spark, spec, ranges, _prefix(), options=options)
    assert len(uncapped.handles) == len(filled)
    _abort(bootstrap, uncapped)


def test_allow_reordering_splits_a_range_over_producers_and_still_copies_once(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """A pipeline that declares it needs no order (allow_reordering) has one partition's
    range split over several write partitions, each with its own transactional id; their
    transactions together hold every record once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=2, prefix="out")
    records = _seed(bootstrap, source, 1000)
    prefix = _prefix()
    spec = _spec(
        bootstrap,
        source,
        sink,
        allow_reordering=True,
        source_kafka={"key_format": "string"},
        sink_kafka={"key_format": "string"},
    )
    result = run_precommit_batch(
        spark,
        spec,
        pipeline=PipelineId(spec.name),
        task=TaskId("copy/0"),
        checkpoint_id=CheckpointId(1),
        offset_ranges=_ranges(bootstrap, source),
        transactional_id_prefix=prefix,
        options=BatchOptions(max_offsets_per_split=300),
    )
    ids = [h.transactional_id for h in result.handles]
    assert ids == [f"{prefix}-{k}" for k in range(4)]  # 1000 offsets in chunks of 300
    _commit(bootstrap, result)
    output = _wait_visible(bootstrap, sink, 2, 1000)
    assert sorted((r.key, r.value) for r in output) == sorted(records)
    # Without allow_reordering the same range stays one producer's.
    ordered = _run(spark, _spec(bootstrap, source, sink), _ranges(bootstrap, source), _prefix())
    assert len(ordered.handles) == 1
    _abort(bootstrap, ordered)


def test_aborted_handles_make_output_never_visible(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2, prefix="in"), new_topic(partitions=1, prefix="out")
    _seed(bootstrap, source, 300)
    result = _run(spark, _spec(bootstrap, source, sink), _ranges(bootstrap, source), _prefix())

    _abort(bootstrap, result)
    _abort(bootstrap, result)  # idempotent

    # The abort markers move the last stable offset past the data: nothing is pending.
    wait_for(
        "the last stable offset to pass the aborted data",
        lambda: stable_end_offsets(bootstrap, sink, 1) == [301],
        timeout_s=30,
    )
    # 300 records + 1 abort marker: the two small ranges were packed into one transaction.
    assert len(result.handles) == 1
    assert stable_end_offsets(bootstrap, sink, 1) == [301]
    assert read_topic(bootstrap, sink, partitions=1) == []
    with pytest.raises(HandleLostError, match="cannot be committed"):
        _commit(bootstrap, result, timeout_s=10)


def test_retried_attempt_on_same_slot_fences_the_first(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    records = _seed(bootstrap, source, 500)
    spec, ranges, prefix = _spec(bootstrap, source, sink), _ranges(bootstrap, source), _prefix()

    first = _run(spark, spec, ranges, prefix)
    second = _run(spark, spec, ranges, prefix)  # e.g. Spark retried the write partition

    assert [h.transactional_id for h in first.handles] == [f"{prefix}-0"]
    assert [h.transactional_id for h in second.handles] == [f"{prefix}-0"]
    assert second.handles[0].producer_epoch > first.handles[0].producer_epoch
    with pytest.raises(HandleLostError, match="cannot be committed"):
        _commit(bootstrap, first, timeout_s=10)
    _commit(bootstrap, second)
    output = _wait_visible(bootstrap, sink, 1, 500)
    assert [(r.key, r.value) for r in output] == records  # once, in order


#: An identity transform Spark must run (a filter): the data sources' path.
_THROUGH_SPARK = "SELECT * FROM input WHERE offset >= 0"


def _counts(result: PrecommitResult) -> tuple[object, ...]:
    return (
        result.records_in,
        result.records_out,
        result.bytes_in,
        result.bytes_out,
        result.oldest_timestamp_ms,
        result.write_partitions,
        len(result.handles),
    )


def _copied(bootstrap: str, topic: str, count: int, *, stamps: bool) -> list[tuple[object, ...]]:
    return [
        (r.partition, r.key, r.value, r.headers, r.timestamp_ms if stamps else None)
        for r in _wait_visible(bootstrap, topic, 2, count)
    ]


_STRINGS = {"format": "string", "key_format": "string"}


@pytest.mark.parametrize(
    ("transform", "through_spark", "stamps", "formats"),
    [
        # No transform: every column, the source's timestamps kept; bytes in and out, so
        # each consume call's messages go to the producer as they are.
        (None, _THROUGH_SPARK, True, {}),
        # Only selecting: the sink gets those columns (no timestamp: the producer stamps).
        (
            "SELECT key, value, headers FROM input",
            "SELECT key, value, headers FROM input WHERE offset >= 0",
            False,
            {},
        ),
        # Without the key: the sink's records have none, and its bytes are the values'.
        (
            "SELECT value, headers FROM input",
            "SELECT value, headers FROM input WHERE offset >= 0",
            False,
            {},
        ),
        # Decoded formats: chained through the source's Arrow batches and the codecs.
        (None, _THROUGH_SPARK, True, {"source_kafka": _STRINGS, "sink_kafka": _STRINGS}),
    ],
    ids=["bytes-every-column", "bytes-selected-columns", "bytes-no-key", "strings"],
)
def test_a_batch_that_changes_no_record_runs_chained_and_writes_what_spark_writes(
    spark: SparkSession,
    kafka_broker: Any,
    new_topic: Callable[..., str],
    transform: str | None,
    through_spark: str,
    stamps: bool,
    formats: dict[str, Any],
) -> None:
    """No transform, or one that only selects columns, with bad records failing the task:
    the batch runs chained (each Spark task reads and produces, chained.py) with no planning
    round; the same input through an equivalent query Spark has to run (the data sources'
    path) gives the same records, headers (and timestamps) in the same order, and the same
    counts."""
    bootstrap = kafka_broker.bootstrap_servers
    source = new_topic(partitions=2, prefix="in")
    chained_out, spark_out = new_topic(partitions=2, prefix="out"), new_topic(partitions=2)
    _seed(bootstrap, source, 1500)
    produce(bootstrap, source, [(b"h", b"with-headers")] * 20, headers=[("trace", b"t1")])
    extra = {} if transform is None else {"transform": {"sql": transform}}
    chained_spec = _spec(bootstrap, source, chained_out, **extra, **formats)
    spark_spec = _spec(bootstrap, source, spark_out, transform={"sql": through_spark}, **formats)
    assert chained_columns(chained_spec) is not None and chained_columns(spark_spec) is None
    ranges = _ranges(bootstrap, source)

    chained = _run(spark, chained_spec, ranges, _prefix())
    through = _run(spark, spark_spec, ranges, _prefix())

    assert [phase for phase, _ in chained.phase_seconds] == ["topics", "write"]
    assert [phase for phase, _ in through.phase_seconds] == ["topics", "plan", "write"]
    assert _counts(chained) == _counts(through)
    assert chained.records_out == 1520 and chained.oldest_timestamp_ms is not None
    _commit(bootstrap, chained)
    _commit(bootstrap, through)
    copied = _copied(bootstrap, chained_out, 1520, stamps=stamps)
    through_spark_copied = _copied(bootstrap, spark_out, 1520, stamps=stamps)
    if transform is not None and "key" not in transform:
        # Keyless records go to whichever partition the producer picks: the same records.
        copied, through_spark_copied = (
            sorted(r[1:] for r in records) for records in (copied, through_spark_copied)
        )
    assert copied == through_spark_copied
    assert any(headers == (("trace", b"t1"),) for *_, headers, _ in copied)


def test_a_chained_tasks_retry_fences_the_attempt_that_died(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """Spark's retry of a chained task writes on the same transactional id as the attempt
    that died after flushing part of the range: its init_transactions fences that attempt,
    whose handle can never be committed, and the retry's output holds every record once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    records = _seed(bootstrap, source, 600)
    [whole] = _ranges(bootstrap, source)
    half = OffsetRange(whole.topic, whole.partition, whole.start_offset, 300)
    source_options = SourceOptions.parse(
        {"bootstrap_servers": bootstrap, "offset_ranges": ranges_to_option([whole])}
    )
    sink_options = SinkOptions.parse(
        {"bootstrap_servers": bootstrap, "topic": sink, "transactional_id_prefix": _prefix()}
    )

    died = copy_partition(source_options, sink_options, write_partition=0, ranges=[half], attempt=0)
    retried = copy_partition(
        source_options, sink_options, write_partition=0, ranges=[whole], attempt=1
    )

    assert (died.records_read, retried.records_read) == (300, 600)
    assert died.message.handle is not None and retried.message.handle is not None
    assert died.message.handle.transactional_id == retried.message.handle.transactional_id
    with pytest.raises(HandleLostError, match="cannot be committed"):
        Committer(timeout_s=10).commit(
            [died.message.handle.on(bootstrap)], what="the dead attempt", sink_properties={}
        )
    Committer().commit([retried.message.handle.on(bootstrap)], what="retry", sink_properties={})
    output = _wait_visible(bootstrap, sink, 1, 600)
    assert [(r.key, r.value) for r in output] == records


def test_a_chained_task_whose_range_holds_only_aborted_records_reports_no_transaction(
    kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """A chained task opens its producer before it reads (``open_early``). When its range
    holds no record to copy (only an aborted transaction and its marker), the empty
    transaction is ended there: no handle is reported, so nothing is left for the leader to
    commit, and the same transactional id copies the next range as usual."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    produce_transaction(
        bootstrap, source, [b"x0", b"x1"], transactional_id=f"{source}-writer", commit=False
    )

    def past_the_marker() -> OffsetRange | None:
        [snapshot] = _ranges(bootstrap, source)
        return snapshot if snapshot.end_offset > 0 else None

    # The coordinator writes the abort marker after abort_transaction() returns; until then
    # the open transaction holds the last stable offset, and so the range's end, at 0.
    aborted = wait_for("the abort marker written", past_the_marker, timeout_s=30)
    assert aborted.size == 3  # two aborted records and the abort marker
    produce(bootstrap, source, [(b"k", b"after")], partition=0)
    [after] = _ranges(bootstrap, source, start_offsets={(source, 0): aborted.end_offset})
    source_options = SourceOptions.parse(
        {"bootstrap_servers": bootstrap, "offset_ranges": ranges_to_option([aborted, after])}
    )
    sink_options = SinkOptions.parse(
        {"bootstrap_servers": bootstrap, "topic": sink, "transactional_id_prefix": _prefix()}
    )

    empty = copy_partition(
        source_options, sink_options, write_partition=0, ranges=[aborted], attempt=0
    )
    copied = copy_partition(
        source_options, sink_options, write_partition=0, ranges=[after], attempt=0
    )

    assert (empty.records_read, empty.message.records_written) == (0, 0)
    assert empty.message.handle is None
    assert copied.records_read == 1 and copied.message.handle is not None
    Committer().commit([copied.message.handle.on(bootstrap)], what="next", sink_properties={})
    assert [(r.key, r.value) for r in _wait_visible(bootstrap, sink, 1, 1)] == [(b"k", b"after")]


def test_sql_transform_is_applied_and_headers_kept(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    produce(
        bootstrap,
        source,
        [(f"k{i}".encode(), f"hello {i}".encode()) for i in range(50)],
        headers=[("origin", b"test")],
    )
    spec = _spec(
        bootstrap,
        source,
        sink,
        source_kafka={"format": "string", "key_format": "string"},
        sink_kafka={"format": "string", "key_format": "string"},
        transform={
            "sql": "SELECT key, upper(value) AS value, headers FROM input"
            " WHERE CAST(substring(key, 2) AS INT) % 2 = 0"
        },
    )
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert (result.records_in, result.records_out) == (50, 25)
    _commit(bootstrap, result)
    output = _wait_visible(bootstrap, sink, 1, 25)
    assert [r.value for r in output] == [f"HELLO {i}".encode() for i in range(0, 50, 2)]
    assert all(r.headers == (("origin", b"test"),) for r in output)


def test_sql_error_surfaces_spark_message(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    _seed(bootstrap, source, 10)
    spec = _spec(bootstrap, source, sink, transform={"sql": "SELECT no_such_column FROM input"})
    with pytest.raises(TransformError, match="no_such_column"):
        _run(spark, spec, _ranges(bootstrap, source), _prefix())


@pytest.mark.timeout(120)  # before the fix this batch blocked until killed
def test_a_transform_that_reads_none_of_the_batch_fails_within_seconds(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """Issue 16's SQL read a file (refused before it runs now: test_transform_limits.py)
    rather than the view `input`, and the batch used to wait forever for its record count
    (an Observation filled only when the input is read), so every checkpoint hung until its
    timeout. A query over a table-valued function reads none of the batch either: it now
    fails before writing, naming the field and the fix; so does a filter the optimizer proves
    always false."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    _seed(bootstrap, source, 10)
    for sql in (
        "SELECT CAST(id AS STRING) AS value FROM range(3)",
        "SELECT key, value FROM input WHERE 1 = 0",
    ):
        spec = _spec(bootstrap, source, sink, transform={"sql": sql})
        started = time.monotonic()
        with pytest.raises(TransformError) as caught:
            _run(spark, spec, _ranges(bootstrap, source), _prefix())
        elapsed_s = time.monotonic() - started
        message = str(caught.value)
        assert message.startswith("transform.sql reads none of the batch's records"), message
        assert "read from the view `input`" in message
        assert elapsed_s < 30, f"{sql!r} failed only after {elapsed_s:.1f} s"
    # A transform that reads `input` still runs (the check finds its own batch's count).
    spec = _spec(bootstrap, source, sink, transform={"sql": "SELECT key, value FROM input"})
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert result.records_in == 10
    _abort(bootstrap, result)


def _json_input(bootstrap: str, topic: str) -> None:
    good = [(f"k{i}".encode(), json.dumps({"n": i}).encode()) for i in range(20)]
    produce(bootstrap, topic, [*good[:7], (b"bad", b"{not json"), *good[7:]])


def test_tolerance_none_fails_with_record_location_and_leaves_nothing_open(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2, prefix="in"), new_topic(partitions=1, prefix="out")
    # Partition 0 is clean (its task pre-commits a transaction); partition 1 has a bad record.
    produce(bootstrap, source, [(None, b'{"ok": true}')] * 300, partition=0)
    good = [(f"k{i}".encode(), json.dumps({"n": i}).encode()) for i in range(20)]
    produce(bootstrap, source, [*good[:7], (b"bad", b"{not json"), *good[7:]], partition=1)
    spec = _spec(bootstrap, source, sink, source_kafka={"format": "json"})
    with pytest.raises(RecordError) as failure:
        _run(spark, spec, _ranges(bootstrap, source), _prefix())
    location = failure.value.location
    assert (location.topic, location.partition, location.offset) == (source, 1, 7)
    assert "not valid JSON" in failure.value.record_reason
    # Whatever the clean task wrote was aborted by the failed job: nothing is visible and
    # no open transaction holds the last stable offset back.
    assert read_topic(bootstrap, sink, partitions=1) == []
    log_end = stable_end_offsets(bootstrap, sink, 1, committed=False)
    wait_for(
        "the last stable offset to reach the log end",
        lambda: stable_end_offsets(bootstrap, sink, 1) == log_end,
        timeout_s=30,
    )
    assert stable_end_offsets(bootstrap, sink, 1) == log_end


def test_a_failed_chained_job_reports_its_own_error_when_fencing_fails_too(
    spark: SparkSession,
    kafka_broker: Any,
    new_topic: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fence after a failed chained job is best effort, as a data source's abort():
    when it fails too (Kafka down, often why the job failed), the job's own error, here
    the bad record with its location, is what the caller gets."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    produce(bootstrap, source, [(b"k", b'{"ok": 1}'), (b"bad", b"{not json")], partition=0)
    spec = _spec(bootstrap, source, sink, source_kafka={"format": "json"})
    assert chained_columns(spec) is not None

    def fence_fails(*_args: object) -> None:
        raise RuntimeError("the broker did not answer the fence")

    monkeypatch.setattr(chained, "_fence_write_partitions", fence_fails)
    with pytest.raises(RecordError) as failure:
        _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert failure.value.location.offset == 1


def test_tolerance_all_routes_bad_records_to_dead_letter_topic(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    dlq = new_topic(partitions=1, prefix="dlq")
    _json_input(bootstrap, source)
    spec = _spec(
        bootstrap,
        source,
        sink,
        source_kafka={"format": "json"},
        sink_kafka={"format": "json"},
        errors={"tolerance": "all", "dead_letter_topic": dlq},
        transform={"sql": "SELECT key, value FROM input"},
    )
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert (result.records_in, result.records_out, result.dead_lettered) == (21, 20, 1)
    assert read_topic(bootstrap, dlq, partitions=1) == []  # dead letters are exactly once too
    _commit(bootstrap, result)
    assert len(_wait_visible(bootstrap, sink, 1, 20)) == 20
    [dead] = _wait_visible(bootstrap, dlq, 1, 1)
    assert (dead.key, dead.value) == (b"bad", b"{not json")
    headers = dict(dead.headers)
    assert headers[ERROR_HEADER_TOPIC] == source.encode()
    assert headers[ERROR_HEADER_PARTITION] == b"0"
    assert headers[ERROR_HEADER_OFFSET] == b"7"
    assert b"not valid JSON" in (headers[ERROR_HEADER_REASON] or b"")


def test_at_least_once_writes_visible_records_without_transactions(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2, prefix="in"), new_topic(partitions=2, prefix="out")
    records = _seed(bootstrap, source, 400)
    spec = _spec(bootstrap, source, sink, delivery="at_least_once")
    # On another thread, as the executor's task threads run batches.
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(_run, spark, spec, _ranges(bootstrap, source), _prefix()).result()
    assert result.handles == () and result.records_out == 400
    assert sorted((r.key, r.value) for r in read_topic(bootstrap, sink, partitions=2)) == sorted(
        records
    )


def test_missing_sink_topic_is_named(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source = new_topic(partitions=1, prefix="in")
    spec = _spec(bootstrap, source, "missing-output-topic")
    with pytest.raises(SinkError, match="missing-output-topic"):
        _run(spark, spec, _ranges(bootstrap, source), _prefix())
    with pytest.raises(SourceError, match="missing-input-topic"):
        _run(spark, _spec(bootstrap, "missing-input-topic", source), [], _prefix())


def upper_values(frame: DataFrame) -> DataFrame:
    """A ``transform.python`` target used below."""
    return frame.select("key", F.upper(F.col("value").cast("string")).alias("value"))


def test_python_transform_is_applied(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    produce(bootstrap, source, [(b"k", b"abc"), (b"k", b"def")])
    spec = _spec(bootstrap, source, sink, transform={"python": f"{__name__}:upper_values"})
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    _commit(bootstrap, result)
    assert [r.value for r in _wait_visible(bootstrap, sink, 1, 2)] == [b"ABC", b"DEF"]


def _sink_columns(spark: SparkSession, spec: PipelineSpec) -> tuple[str, ...]:
    """The columns the sink would write, from an empty source: no Kafka read."""
    schema = source_schema(spec.source.format, spec.source.key_format, marked=False)
    empty = spark.createDataFrame([], schema)
    return tuple(prepare_sink_frame(apply_transform(spark, spec, empty), spec).columns)


def test_transform_errors_name_the_column_and_the_fix(spark: SparkSession) -> None:
    def spec(sql: str, **extra: Any) -> PipelineSpec:
        return _spec("127.0.0.1:1", "orders", "out", transform={"sql": sql}, **extra)

    assert _sink_columns(spark, spec("SELECT key, value, headers FROM orders")) == (
        "value",
        "key",
        "headers",
    )
    with pytest.raises(TransformError, match="no_such_column"):
        _sink_columns(spark, spec("SELECT no_such_column FROM input"))
    with pytest.raises(TransformError, match="'value' column"):
        _sink_columns(spark, spec("SELECT key FROM input"))
    with pytest.raises(TransformError, match="cast it"):
        _sink_columns(spark, spec("SELECT 1 AS value FROM input"))


FLAKY_AT = 25_000


def fail_first_attempt_midway(frame: DataFrame) -> DataFrame:
    """A ``transform.python`` whose first task attempt dies after part of its output."""

    # Local, so cloudpickle ships it by value (Spark's workers cannot import tests.*).
    def check(value: bytes) -> bytes:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and value == b"%d" % FLAKY_AT:
            raise RuntimeError("injected failure of the first attempt")
        return value

    return frame.select("key", F.udf(check, "binary")(F.col("value")).alias("value"))


def test_spark_task_retry_fences_the_failed_attempts_transaction(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    count = 30_000
    produce(bootstrap, source, [(b"k%d" % (i % 7), b"%d" % i) for i in range(count)])
    spec = _spec(
        bootstrap, source, sink, transform={"python": f"{__name__}:fail_first_attempt_midway"}
    )

    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())

    assert result.records_out == count and len(result.handles) == 1
    _commit(bootstrap, result)
    output = _wait_visible(bootstrap, sink, 1, count)
    assert [r.value for r in output] == [b"%d" % i for i in range(count)]
    # The first attempt did write into the log before it died; fencing made it invisible.
    [log_end] = stable_end_offsets(bootstrap, sink, 1, committed=False)
    assert log_end > count + 1, "the first attempt wrote nothing: the test proved nothing"


# ---------------------------------------------------------------------------------------
# Avro through the schema registry (Confluent's own serializer in, deserializer out)

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
SHIPMENT = {
    "type": "record",
    "name": "Shipment",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "priority", "type": "boolean", "default": False},
    ],
}


def _produce_avro(
    bootstrap: str, registry: RegistryProcess, topic: str, orders: list[dict[str, Any]]
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serializer = AvroSerializer(client, json.dumps(ORDER))
    produce(
        bootstrap,
        topic,
        [
            (
                str(order["id"]).encode(),
                serializer(order, SerializationContext(topic, MessageField.VALUE)),
            )
            for order in orders
        ],
        partition=0,
    )


def _avro_spec(bootstrap: str, url: str, source: str, sink: str, **extra: Any) -> PipelineSpec:
    return _spec(
        bootstrap,
        source,
        sink,
        source_kafka={"format": "avro", "schema_registry_url": url},
        sink_kafka={"format": "avro", "schema_registry_url": url},
        **extra,
    )


def test_avro_in_sql_avro_out_read_by_confluents_deserializer(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str], module_registry: Any
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    orders = [{"id": i, "item": f"item-{i}", "note": None if i % 2 else "gift"} for i in range(30)]
    _produce_avro(bootstrap, module_registry, source, orders)
    client = SchemaRegistryClient({"url": module_registry.url})
    client.register_schema(f"{sink}-value", Schema(json.dumps(SHIPMENT), "AVRO"))
    spec = _avro_spec(
        bootstrap,
        module_registry.url,
        source,
        sink,
        # The avro value is JSON text in Spark; the output struct is written with the
        # newest schema of "<sink>-value", its missing field taking the default.
        transform={
            "sql": "SELECT key, named_struct("
            "'order_id', CAST(get_json_object(value, '$.id') AS BIGINT), "
            "'item', upper(get_json_object(value, '$.item'))) AS value "
            "FROM input WHERE get_json_object(value, '$.note') IS NULL"
        },
    )
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert (result.records_in, result.records_out) == (30, 15)
    _commit(bootstrap, result)
    output = _wait_visible(bootstrap, sink, 1, 15)
    deserializer = AvroDeserializer(client)
    decoded = [
        deserializer(r.value, SerializationContext(sink, MessageField.VALUE)) for r in output
    ]
    assert decoded == [
        {"order_id": i, "item": f"ITEM-{i}", "priority": False} for i in range(1, 30, 2)
    ]


def test_undecodable_avro_fails_the_task_with_its_location_or_goes_to_the_dead_letters(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str], module_registry: Any
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    dlq = new_topic(partitions=1, prefix="dlq")
    _produce_avro(bootstrap, module_registry, source, [{"id": i, "item": "x"} for i in range(5)])
    produce(bootstrap, source, [(b"bad", b"plain text, not Avro")], partition=0)  # offset 5
    _produce_avro(bootstrap, module_registry, source, [{"id": i, "item": "y"} for i in range(5, 9)])
    SchemaRegistryClient({"url": module_registry.url}).register_schema(
        f"{sink}-value", Schema(json.dumps(ORDER), "AVRO")
    )

    with pytest.raises(RecordError) as failure:
        _run(
            spark,
            _avro_spec(bootstrap, module_registry.url, source, sink),
            _ranges(bootstrap, source),
            _prefix(),
        )
    location = failure.value.location
    assert (location.topic, location.partition, location.offset) == (source, 0, 5)
    assert "magic byte" in failure.value.record_reason

    spec = _avro_spec(
        bootstrap,
        module_registry.url,
        source,
        sink,
        errors={"tolerance": "all", "dead_letter_topic": dlq},
    )
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert (result.records_in, result.records_out, result.dead_lettered) == (10, 9, 1)
    _commit(bootstrap, result)
    assert len(_wait_visible(bootstrap, sink, 1, 9)) == 9
    [dead] = _wait_visible(bootstrap, dlq, 1, 1)
    assert (dead.key, dead.value) == (b"bad", b"plain text, not Avro")
    assert dict(dead.headers)[ERROR_HEADER_OFFSET] == b"5"


def test_avro_sink_without_a_registered_schema_names_the_subject(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str], module_registry: Any
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    _produce_avro(bootstrap, module_registry, source, [{"id": 1, "item": "x"}])
    with pytest.raises(SinkError, match=f"{sink}-value.*lockgate schema register"):
        _run(
            spark,
            _avro_spec(bootstrap, module_registry.url, source, sink),
            _ranges(bootstrap, source),
            _prefix(),
        )
