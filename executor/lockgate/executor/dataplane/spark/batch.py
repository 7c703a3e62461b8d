"""One checkpoint's pre-commit batch on the shared SparkSession.

``run_precommit_batch`` is the executor's half of step 2 of DESIGN.md's checkpoint
protocol: read the offset ranges, transform, write the sink in its prepared state (Kafka
records flushed inside open transactions) and return what ``ReportPrecommit`` needs.
Ending those transactions (steps 4 and 5) is :mod:`lockgate.executor.committer`'s.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import (
    Delivery,
    ErrorTolerance,
    PipelineSpec,
    RecordFormat,
)
from lockgate.executor.dataplane.spark.chained import chained_columns, run_chained
from lockgate.executor.dataplane.spark.kafka_sink import (
    ERROR_HEADER_OFFSET,
    ERROR_HEADER_PARTITION,
    ERROR_HEADER_REASON,
    ERROR_HEADER_STAGE,
    ERROR_HEADER_TOPIC,
    TARGET_TOPIC_COLUMN,
    KafkaSink,
    KafkaSinkCommitMessage,
    SinkOptions,
    read_result_file,
)
from lockgate.executor.dataplane.spark.kafka_source import (
    ERROR_COLUMN,
    ON_BAD_RECORD_FAIL,
    ON_BAD_RECORD_MARK,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    KafkaSource,
    SourceOptions,
    ranges_to_option,
)
from lockgate.executor.dataplane.spark.offsets import topic_partitions
from lockgate.executor.dataplane.spark.transform import INPUT_VIEW, apply_transform, spark_message
from lockgate.executor.dataplane.transform_modules import EXAMPLE_TRANSFORM_MODULES
from lockgate.executor.errors import RecordError, SinkError, SourceError, TransformError
from lockgate.schema_registry.serde import RestSchemaFetcher, SerdeError

_HEADERS_TYPE = ArrayType(
    StructType().add("key", StringType()).add("value", BinaryType()), containsNull=True
)


@dataclass(frozen=True)
class BatchOptions:
    """Tuning of one batch; the defaults suit a single machine."""

    # Split a range into chunks of this many offsets, only when the pipeline has no order.
    max_offsets_per_split: int = 200_000
    #: Pack source ranges into Spark partitions of at most this many offsets when the
    #: pipeline keeps order (`kafka_source.pack_ranges`): a small batch runs one task, one
    #: consumer and one transaction; 0 keeps one partition per range.
    pack_offsets_per_partition: int = 10_000
    #: And into at most this many partitions, the session's task slots (`task_slots`): one
    #: wave of tasks, each with one producer and transaction, not several; 0: no limit.
    max_packed_partitions: int = 0
    transaction_timeout_ms: int = 600_000
    stall_timeout_s: float = 60.0
    #: Module prefixes a `transform.python` may come from (`--allow-transform-module`).
    allowed_transform_modules: tuple[str, ...] = EXAMPLE_TRANSFORM_MODULES


@dataclass(frozen=True)
class PrecommitResult:
    """What the coordinator's ``ReportPrecommit`` needs from one task's checkpoint."""

    handles: tuple[TransactionHandle, ...]
    consumed_ranges: tuple[OffsetRange, ...]
    records_in: int
    records_out: int
    dead_lettered: int
    write_partitions: int
    duration_s: float
    oldest_timestamp_ms: int | None = None
    """The oldest Kafka timestamp among the records read; None if none had one."""
    #: The Spark jobs of the batch's job group, oldest first.
    spark_job_ids: tuple[int, ...] = ()
    bytes_in: int = 0
    """Bytes of the keys and values read."""
    bytes_out: int = 0
    """Bytes of the keys and values written to the sink topic."""
    #: Seconds spent in each step of the batch, in order: ``topics`` (the topics'
    #: existence), ``plan`` (the read's and the transform's plans, Python data source
    #: ``schema()`` included) and ``write`` (the Spark job: read and write planning, the
    #: tasks and the writer's ``commit()``). What ``bench/checkpoint_cost.py`` breaks down.
    phase_seconds: tuple[tuple[str, float], ...] = ()


def _sink_column(frame: DataFrame, name: str, fmt: RecordFormat, field: str) -> Column:
    data_type: DataType = frame.schema[name].dataType
    column = F.col(name)
    if isinstance(data_type, BinaryType | StringType):
        return column
    if (fmt is RecordFormat.JSON or fmt.needs_registry) and isinstance(
        data_type, StructType | MapType | ArrayType
    ):
        return F.to_json(column)
    if fmt is RecordFormat.STRING:
        return column.cast("string")
    raise TransformError(
        f"the transform's {name!r} column is {data_type.simpleString()}, but {field} is"
        f" {fmt.value}: cast it to binary or string in the transform"
        + (
            " (or use format json, avro, json_schema or protobuf for structs)"
            if fmt is RecordFormat.BYTES
            else ""
        )
    )


def prepare_sink_frame(frame: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Select and type the columns the Kafka sink writes: key, value, headers, timestamp.

    ``topic``/``partition``/``offset`` are kept when present, only to locate bad records.
    """
    names = frame.columns
    if "value" not in names:
        raise TransformError(
            "the transform must produce a 'value' column (and optionally key, headers,"
            f" timestamp); it produced: {', '.join(names) or 'nothing'}"
        )
    sink = spec.sink
    columns = [_sink_column(frame, "value", sink.format, "sink.kafka.format").alias("value")]
    if "key" in names:
        columns.append(
            _sink_column(frame, "key", sink.key_format, "sink.kafka.key_format").alias("key")
        )
    if "headers" in names:
        if frame.schema["headers"].dataType.simpleString() != _HEADERS_TYPE.simpleString():
            raise TransformError(
                "the transform's 'headers' column must be array<struct<key:string,value:binary>>,"
                f" got {frame.schema['headers'].dataType.simpleString()}"
            )
        columns.append(F.col("headers"))
    if "timestamp" in names and isinstance(frame.schema["timestamp"].dataType, TimestampType):
        columns.append(F.col("timestamp"))
    for locator, spark_type in (("topic", "string"), ("partition", "int"), ("offset", "bigint")):
        if locator in names and frame.schema[locator].dataType.simpleString() == spark_type:
            columns.append(F.col(locator))
    return frame.select(*columns)


def _dead_letter_frame(marked: DataFrame, dead_letter_topic: str) -> DataFrame:
    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    error_headers = F.array(
        header(ERROR_HEADER_TOPIC, F.col("topic")),
        header(ERROR_HEADER_PARTITION, F.col("partition").cast("string")),
        header(ERROR_HEADER_OFFSET, F.col("offset").cast("string")),
        header(ERROR_HEADER_REASON, F.col(ERROR_COLUMN)),
        header(ERROR_HEADER_STAGE, F.lit("source")),
    )
    return marked.where(F.col(ERROR_COLUMN).isNotNull()).select(
        F.col(RAW_KEY_COLUMN).alias("key"),
        F.col(RAW_VALUE_COLUMN).alias("value"),
        F.concat(F.coalesce(F.col("headers"), F.array().cast(_HEADERS_TYPE)), error_headers).alias(
            "headers"
        ),
        F.col("timestamp"),
        F.lit(dead_letter_topic).alias(TARGET_TOPIC_COLUMN),
    )


def _count(frame: DataFrame, name: str) -> tuple[DataFrame, Observation]:
    # The oldest Kafka timestamp rides on the same observation (one aggregate in the job,
    # no per-record Python): it is what lockgate.visibility.latency is measured from.
    observation = Observation(name)
    return frame.observe(
        observation,
        F.count(F.lit(1)).alias("n"),
        F.min(F.unix_micros(F.col("timestamp"))).alias("oldest_us"),
        F.sum(_payload_bytes(frame, "key") + _payload_bytes(frame, "value")).alias("bytes"),
    ), observation


def _payload_bytes(frame: DataFrame, column: str) -> Column:
    """The size in bytes of a key or value column: bytes by length, text by its UTF-8
    octets, 0 for a null. A value a format decoded into a structure (avro, json) has no
    size left to measure and counts 0 (lockgate.task.bytes.read says so)."""
    data_type = frame.schema[column].dataType
    if isinstance(data_type, BinaryType):
        size = F.length(F.col(column))
    elif isinstance(data_type, StringType):
        size = F.octet_length(F.col(column))
    else:
        return F.lit(0)
    return F.coalesce(size, F.lit(0))


def _unique(name: str) -> str:
    # A name no other plan has, so `_check_reads_input` can find this very count in a plan.
    return f"lockgate_{name}_{uuid.uuid4().hex}"


def _check_reads_input(transformed: DataFrame, counted_name: str, spec: PipelineSpec) -> None:
    """Refuse, before anything is written, a transform whose plan reads none of the batch's
    records: a query over another source (``FROM text.`/etc/passwd```), or whose filter
    the optimizer proves always false (``WHERE 1=0``, ``LIMIT 0``).

    Why refuse rather than count some other way: the record count is an Observation that
    Spark fills only when a plan that reads the input runs, so reading it blocked the
    checkpoint forever (issue 16); and the output of such a query does not come from the
    checkpoint's offset ranges, so every checkpoint would write the same unrelated records.
    The check looks for the count's node in the optimised plan, where Spark has already
    dropped what never runs.
    """
    try:
        plan = str(transformed._jdf.queryExecution().optimizedPlan().toString())
    except (PySparkException, Py4JJavaError) as exc:
        raise TransformError(f"{_transform_field(spec)} failed: {spark_message(exc)}") from exc
    if counted_name in plan:
        return
    if spec.transform.sql is not None:
        fix = (
            f"read from the view `{INPUT_VIEW}` (or one named after a source topic), e.g. "
            f"`SELECT key, value FROM {INPUT_VIEW}`"
        )
    else:
        fix = "build the result from the DataFrame the function is given"
    raise TransformError(
        f"{_transform_field(spec)} reads none of the batch's records (it reads another "
        f"source, or a filter that is always false leaves nothing to read): {fix}"
    )


def _transform_field(spec: PipelineSpec) -> str:
    return "transform.sql" if spec.transform.sql is not None else "transform.python"


def _activate(spark: SparkSession) -> SparkSession:
    # Py4J runs each Python thread on its own JVM thread, whose active SparkSession is
    # unset, and Python data sources are looked up through the active session: without
    # this a batch on any thread but the one that built the session fails with
    # DATA_SOURCE_NOT_FOUND (lockgate_kafka_sink) (measured, PySpark 4.3.0).
    jvm = spark._jvm
    if jvm is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    return spark


#: The registry's ``schemaType`` each registry format writes with.
_REGISTRY_SCHEMA_TYPES = {
    RecordFormat.AVRO: "AVRO",
    RecordFormat.JSON_SCHEMA: "JSON",
    RecordFormat.PROTOBUF: "PROTOBUF",
}


def _check_topics_exist(spec: PipelineSpec) -> None:
    for topic in spec.source.topics:
        topic_partitions(
            bootstrap_servers=spec.source.bootstrap_servers,
            topic=topic,
            properties=dict(spec.source.properties),
        )
    sink_topics = [spec.sink.topic]
    if spec.errors.dead_letter_topic is not None:
        sink_topics.append(spec.errors.dead_letter_topic)
    for topic in sink_topics:
        try:
            topic_partitions(
                bootstrap_servers=spec.sink.bootstrap_servers,
                topic=topic,
                properties=dict(spec.sink.properties),
            )
        except SourceError as exc:
            raise SinkError(
                f"sink topic {topic!r} does not exist on {spec.sink.bootstrap_servers};"
                " create it or fix the spec"
            ) from exc
    if spec.sink.format.needs_registry and spec.sink.schema_registry_url is not None:
        # The writers encode with the subject's newest schema: a missing one (or one of
        # another type) fails here, once and plainly, rather than in every Spark task.
        try:
            _, schema_type, _ = RestSchemaFetcher(spec.sink.schema_registry_url).latest_typed(
                spec.sink.value_subject
            )
        except SerdeError as exc:
            raise SinkError(f"sink.kafka.format {spec.sink.format.value}: {exc}") from exc
        wanted = _REGISTRY_SCHEMA_TYPES[spec.sink.format]
        if schema_type != wanted:
            raise SinkError(
                f"sink.kafka.format {spec.sink.format.value}: the newest schema under subject"
                f" {spec.sink.value_subject!r} is {schema_type}, not {wanted}: register a"
                f" {wanted} schema under it"
            )


@dataclass
class _Input:
    """The batch's source, split into good records and dead letters when marking."""

    records: DataFrame
    counted: Observation
    counted_name: str
    """The name of `counted`, unique to this batch."""
    dead_letters: DataFrame | None = None
    dead_counted: Observation | None = None
    cached: DataFrame | None = None


def _source_options(
    spec: PipelineSpec, ranges: Sequence[OffsetRange], options: BatchOptions, *, marked: bool
) -> dict[str, str]:
    """The Kafka source's options for one batch (``SourceOptions.parse`` reads them)."""
    return {
        "bootstrap_servers": spec.source.bootstrap_servers,
        "offset_ranges": ranges_to_option(ranges),
        "value_format": spec.source.format.value,
        "key_format": spec.source.key_format.value,
        "schema_registry_url": spec.source.schema_registry_url or "",
        "on_bad_record": ON_BAD_RECORD_MARK if marked else ON_BAD_RECORD_FAIL,
        # Split a range only when the pipeline needs no order.
        "max_offsets_per_split": str(options.max_offsets_per_split if spec.allow_reordering else 0),
        "pack_offsets": str(options.pack_offsets_per_partition),
        "max_partitions": str(options.max_packed_partitions),
        "stall_timeout_s": str(options.stall_timeout_s),
        "kafka_properties": json.dumps(dict(spec.source.properties)),
    }


def _sink_options(
    spec: PipelineSpec,
    *,
    transactional_id_prefix: str,
    options: BatchOptions,
    result_path: str = "",
) -> dict[str, str]:
    """The Kafka sink's options for one batch (``SinkOptions.parse`` reads them)."""
    return {
        "bootstrap_servers": spec.sink.bootstrap_servers,
        "topic": spec.sink.topic,
        "delivery": spec.delivery.value,
        "transactional_id_prefix": transactional_id_prefix,
        "value_format": spec.sink.format.value,
        "key_format": spec.sink.key_format.value,
        "schema_registry_url": spec.sink.schema_registry_url or "",
        "tolerance": spec.errors.tolerance.value,
        "dead_letter_topic": spec.errors.dead_letter_topic or "",
        "transaction_timeout_ms": str(options.transaction_timeout_ms),
        "result_path": result_path,
        "kafka_properties": json.dumps(dict(spec.sink.properties)),
        "linger_ms": str(spec.sink.batching.linger_ms),
        "batch_size": str(spec.sink.batching.batch_size),
        "compression": spec.sink.batching.compression.value,
    }


def _read_input(
    session: SparkSession,
    spec: PipelineSpec,
    ranges: Sequence[OffsetRange],
    options: BatchOptions,
) -> _Input:
    marked = spec.errors.tolerance is ErrorTolerance.ALL
    source = (
        session.read.format(KafkaSource.name())
        .options(**_source_options(spec, ranges, options, marked=marked))
        .load()
    )
    counted_name = _unique("in")
    if not marked:
        records, counted = _count(source, counted_name)
        return _Input(records, counted, counted_name)
    # Read once, then split good records from bad ones.
    cached = source.persist(StorageLevel.MEMORY_AND_DISK)
    assert spec.errors.dead_letter_topic is not None
    dead_letters, dead_counted = _count(
        _dead_letter_frame(cached, spec.errors.dead_letter_topic), "dead"
    )
    records, counted = _count(
        cached.where(F.col(ERROR_COLUMN).isNull()).drop(
            RAW_KEY_COLUMN, RAW_VALUE_COLUMN, ERROR_COLUMN
        ),
        counted_name,
    )
    return _Input(records, counted, counted_name, dead_letters, dead_counted, cached)


def _write_prepared(
    output: DataFrame,
    spec: PipelineSpec,
    *,
    describe: str,
    transactional_id_prefix: str,
    options: BatchOptions,
) -> list[KafkaSinkCommitMessage]:
    """Write ``output`` through the 2PC sink; the sink's commit messages, one per partition."""
    with tempfile.TemporaryDirectory(prefix="lockgate-precommit-") as scratch:
        result_path = os.path.join(scratch, "sink-result.json")
        writer = (
            output.write.format(KafkaSink.name())
            .mode("append")
            .options(
                **_sink_options(
                    spec,
                    transactional_id_prefix=transactional_id_prefix,
                    options=options,
                    result_path=result_path,
                )
            )
        )
        try:
            writer.save()
        except (PySparkException, Py4JJavaError) as exc:
            raise _job_failure(exc, describe) from exc
        return read_result_file(result_path)


def _job_failure(exc: PySparkException | Py4JJavaError, describe: str) -> Exception:
    """The typed error of a failed batch job: the bad record a worker named, else the sink."""
    record_error = RecordError.from_text(str(exc))
    if record_error is not None:
        return record_error
    return SinkError(f"{describe} failed: {spark_message(exc)}")


@dataclass(frozen=True)
class _Written:
    """What a batch's job wrote and read, whichever path ran it."""

    messages: list[KafkaSinkCommitMessage]
    records_in: int
    oldest_timestamp_ms: int | None
    bytes_in: int


@dataclass(frozen=True)
class _Batch:
    """One batch to run, whichever path runs it; ``phases`` collects its steps' seconds."""

    session: SparkSession
    spec: PipelineSpec
    ranges: tuple[OffsetRange, ...]
    describe: str
    transactional_id_prefix: str
    options: BatchOptions
    phases: list[tuple[str, float]]


def _run_chained(batch: _Batch, columns: tuple[str, ...]) -> _Written:
    """The batch as chained tasks (``chained.py``), each writing ``columns``."""
    started = time.monotonic()
    spec, options = batch.spec, batch.options
    source = SourceOptions.parse(_source_options(spec, batch.ranges, options, marked=False))
    sink = SinkOptions.parse(
        _sink_options(spec, transactional_id_prefix=batch.transactional_id_prefix, options=options)
    )
    try:
        copied = run_chained(batch.session, source, sink, columns=columns)
    except (PySparkException, Py4JJavaError) as exc:
        raise _job_failure(exc, batch.describe) from exc
    # One Spark job with nothing to plan: all of it is the write.
    batch.phases.append(("write", time.monotonic() - started))
    oldest_us = [c.oldest_timestamp_us for c in copied if c.oldest_timestamp_us is not None]
    return _Written(
        messages=[c.message for c in copied],
        records_in=sum(c.records_read for c in copied),
        oldest_timestamp_ms=min(oldest_us) // 1000 if oldest_us else None,
        bytes_in=sum(c.bytes_read for c in copied),
    )


def _run_dataframe(batch: _Batch) -> _Written:
    """The batch through the two Python data sources, with the transform between them."""
    session, spec, options, phases = batch.session, batch.spec, batch.options, batch.phases
    planned = time.monotonic()
    source = _read_input(session, spec, batch.ranges, options)
    try:
        transformed = apply_transform(
            session, spec, source.records, allowed_modules=options.allowed_transform_modules
        )
        output = prepare_sink_frame(transformed, spec)
        _check_reads_input(output, source.counted_name, spec)
        if source.dead_letters is not None:
            output = output.unionByName(source.dead_letters, allowMissingColumns=True)
        write_started = time.monotonic()
        phases.append(("plan", write_started - planned))
        messages = _write_prepared(
            output,
            spec,
            describe=batch.describe,
            transactional_id_prefix=batch.transactional_id_prefix,
            options=options,
        )
        phases.append(("write", time.monotonic() - write_started))
    finally:
        if source.cached is not None:
            source.cached.unpersist()
    records_in, oldest_ms, bytes_in = _observed(source)
    return _Written(messages, records_in, oldest_ms, bytes_in)


def _job_ids(session: SparkSession, job_group: str) -> tuple[int, ...]:
    """The Spark jobs of a batch's job group, oldest first."""
    return tuple(sorted(session.sparkContext.statusTracker().getJobIdsForGroup(job_group)))


def _observed(source: _Input) -> tuple[int, int | None, int]:
    """Records read (dead letters included), their oldest timestamp in ms if any, and the
    bytes of their keys and values."""
    observed = [source.counted.get]
    if source.dead_counted is not None:
        observed.append(source.dead_counted.get)
    oldest_us = [int(o["oldest_us"]) for o in observed if o.get("oldest_us") is not None]
    records = sum(int(o.get("n", 0)) for o in observed)
    read_bytes = sum(int(o.get("bytes") or 0) for o in observed)
    return records, min(oldest_us) // 1000 if oldest_us else None, read_bytes


def _handles(
    messages: Sequence[KafkaSinkCommitMessage], delivery: Delivery
) -> tuple[TransactionHandle, ...]:
    """The write partitions' transaction handles, in partition order; ``SinkError`` if an
    exactly-once partition wrote records without one."""
    if delivery is Delivery.EXACTLY_ONCE and any(
        m.handle is None and m.records_written + m.dead_lettered > 0 for m in messages
    ):
        raise SinkError("a write partition produced records without a transaction handle")
    return tuple(
        m.handle for m in sorted(messages, key=lambda m: m.write_partition) if m.handle is not None
    )


def run_precommit_batch(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    pipeline: PipelineId,
    task: TaskId,
    checkpoint_id: CheckpointId,
    offset_ranges: Sequence[OffsetRange],
    transactional_id_prefix: str,
    options: BatchOptions | None = None,
) -> PrecommitResult:
    """Run checkpoint ``checkpoint_id``'s batch of one task and leave its output prepared.

    ``spark`` must have the Lockgate data sources registered (``build_spark_session`` does).

    Write partition ``i`` uses ``transactional.id`` ``f"{transactional_id_prefix}-{i}"``:
    the caller must pick a prefix that no pre-committed, not yet committed transaction
    uses, because initialising the id aborts it (the leader allots a task slot's id, with
    the task generation in it: coordinator ``domain/transactional_ids.py``).
    A batch that changes no record (no transform, or one that only selects columns) and
    whose bad records fail the task runs chained (read and produce in one Spark task,
    ``chained.py``); any other through the two Python data sources with the transform
    between them. On failure the job's transactions are aborted (fenced) and a typed error
    is raised: ``RecordError`` (bad record, tolerance none), ``TransformError``,
    ``SourceError`` or ``SinkError``.
    """
    options = options or BatchOptions()
    started = time.monotonic()
    ranges = tuple(offset_ranges)
    _check_topics_exist(spec)
    phases = [("topics", time.monotonic() - started)]
    if all(r.size == 0 for r in ranges):
        return PrecommitResult((), ranges, 0, 0, 0, 0, time.monotonic() - started)

    session = _activate(spark)
    # A stopping executor cancels its jobs (SparkDataPlane.cancel_running); interrupting the
    # task threads also ends a task blocked in the JVM, where cancelling only stops scheduling.
    job_group = f"lockgate-{pipeline}-{task}-{checkpoint_id}"
    session.sparkContext.setJobGroup(
        job_group,
        f"pipeline {pipeline} task {task} checkpoint {checkpoint_id}",
        interruptOnCancel=True,
    )
    batch = _Batch(
        session,
        spec,
        ranges,
        describe=f"checkpoint {checkpoint_id} of pipeline {pipeline}",
        transactional_id_prefix=transactional_id_prefix,
        options=options,
        phases=phases,
    )
    columns = chained_columns(spec)
    written = _run_dataframe(batch) if columns is None else _run_chained(batch, columns)
    messages = written.messages
    return PrecommitResult(
        handles=_handles(messages, spec.delivery),
        consumed_ranges=ranges,
        records_in=written.records_in,
        records_out=sum(m.records_written for m in messages),
        dead_lettered=sum(m.dead_lettered for m in messages),
        write_partitions=len(messages),
        duration_s=time.monotonic() - started,
        oldest_timestamp_ms=written.oldest_timestamp_ms,
        spark_job_ids=_job_ids(session, job_group),
        bytes_in=written.bytes_in,
        bytes_out=sum(m.bytes_written for m in messages),
        phase_seconds=tuple(phases),
    )
