"""The Kafka sink: a PySpark 4 Python data source writer doing two-phase commit.

Per write partition (``write()``, in a Spark task) with ``exactly_once``:

1. a transactional producer on the deterministic ``transactional.id``
   ``<prefix>-<spark partition id>``. A retried or speculative attempt of the same
   partition uses the same id, so its ``init_transactions()`` aborts the earlier attempt's
   transaction and fences its producer: an orphan can never be committed;
2. begin, produce every row (keys partitioned with murmur2 like the Java client, headers
   and timestamps kept, rows in input order, so one source range keeps per-key order),
   flush: that is the pre-commit;
3. return a commit message with the transaction handle (id, producer id, epoch) and let go
   of the producer *without* closing it (``Producer.close()`` would abort the transaction).

``commit(messages)`` runs in a Spark-started Python worker on the driver's machine: it does
**not** commit Kafka transactions, it only writes the handles to ``result_path`` for the
executor, whose coordinator commits them later with
``lockgate.common.kafka_transactions.commit_transaction`` (the same path for normal commits
and recovery). ``abort(messages)`` aborts the handles of the failed job and fences the
ids of partitions that left no message.

``at_least_once`` uses an idempotent producer without transactions and returns no handle.
Spark speculation must stay off (``session.build_spark_session`` does so): a speculative
copy would fence the attempt whose message Spark keeps.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from confluent_kafka import KafkaError, Message, Producer
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.kafka_config import resolve_properties
from lockgate.common.kafka_transactions import (
    TransactionResumeError,
    abort_transaction,
    open_transactional_producer,
)
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, RecordFormat
from lockgate.common.model.producer_batching import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_COMPRESSION,
    DEFAULT_LINGER_MS,
    Compression,
    ProducerBatching,
)
from lockgate.executor.dataplane.spark.formats import DecodeFailure, RecordCodec, codec_for
from lockgate.executor.errors import RecordError, RecordLocation, SinkError, WorkerRecordError

# Optional column naming another destination topic for a row (used for dead letters).
TARGET_TOPIC_COLUMN = "__lockgate_target"

# Error headers on dead-lettered records, as Kafka Connect's __connect.errors.* headers.
ERROR_HEADER_TOPIC = "__lockgate.error.topic"
ERROR_HEADER_PARTITION = "__lockgate.error.partition"
ERROR_HEADER_OFFSET = "__lockgate.error.offset"
ERROR_HEADER_REASON = "__lockgate.error.reason"
ERROR_HEADER_STAGE = "__lockgate.error.stage"


def transactional_id_for(prefix: str, write_partition: int) -> str:
    """The deterministic ``transactional.id`` of one write partition (task slot)."""
    return f"{prefix}-{write_partition}"


@dataclass(frozen=True)
class SinkOptions:
    """The writer's options, parsed from Spark's string options on the driver."""

    bootstrap_servers: str
    topic: str
    delivery: Delivery
    transactional_id_prefix: str
    value_format: RecordFormat
    key_format: RecordFormat
    #: The schema registry's REST URL, for the avro format ("" when unused).
    schema_registry_url: str
    tolerance: ErrorTolerance
    dead_letter_topic: str | None
    result_path: str | None
    transaction_timeout_ms: int
    kafka_properties: dict[str, str] = field(default_factory=dict)
    """`sink.kafka.properties` as written (secrets as references): resolved in the Spark
    worker that builds the producer, so no resolved secret crosses a process boundary."""
    batching: ProducerBatching = field(default_factory=ProducerBatching)
    """`sink.kafka.linger_ms`, `batch_size` and `compression`."""

    def resolved_properties(self) -> dict[str, str]:
        """The sink's Kafka properties with their references read now, here."""
        return resolve_properties(self.kafka_properties)

    @classmethod
    def parse(cls, options: dict[str, str]) -> SinkOptions:
        """Validate the string options Spark hands to the data source."""
        try:
            bootstrap_servers = options["bootstrap_servers"]
            topic = options["topic"]
        except KeyError as exc:
            raise SinkError(f"the Kafka sink needs the option {exc.args[0]!r}") from exc
        delivery = Delivery(options.get("delivery", Delivery.EXACTLY_ONCE.value))
        prefix = options.get("transactional_id_prefix", "")
        if delivery is Delivery.EXACTLY_ONCE and not prefix:
            raise SinkError("exactly_once delivery needs the option 'transactional_id_prefix'")
        tolerance = ErrorTolerance(options.get("tolerance", ErrorTolerance.NONE.value))
        dead_letter_topic = options.get("dead_letter_topic") or None
        if tolerance is ErrorTolerance.ALL and dead_letter_topic is None:
            raise SinkError("tolerance all needs the option 'dead_letter_topic'")
        return cls(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            delivery=delivery,
            transactional_id_prefix=prefix,
            value_format=RecordFormat(options.get("value_format", "bytes")),
            key_format=RecordFormat(options.get("key_format", "bytes")),
            schema_registry_url=options.get("schema_registry_url", ""),
            tolerance=tolerance,
            dead_letter_topic=dead_letter_topic,
            result_path=options.get("result_path") or None,
            transaction_timeout_ms=int(options.get("transaction_timeout_ms", "600000")),
            kafka_properties=json.loads(options.get("kafka_properties", "{}")),
            batching=ProducerBatching(
                linger_ms=int(options.get("linger_ms", DEFAULT_LINGER_MS)),
                batch_size=int(options.get("batch_size", DEFAULT_BATCH_SIZE)),
                compression=Compression(options.get("compression", DEFAULT_COMPRESSION.value)),
            ),
        )


@dataclass(frozen=True)
class KafkaSinkCommitMessage(WriterCommitMessage):
    """What one write partition reports: its transaction (if any) and its counts."""

    write_partition: int
    attempt: int
    handle: TransactionHandle | None
    records_written: int
    dead_lettered: int
    bytes_written: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, for the result file the driver reads."""
        return {
            "write_partition": self.write_partition,
            "attempt": self.attempt,
            "handle": None if self.handle is None else json.loads(self.handle.to_json()),
            "records_written": self.records_written,
            "dead_lettered": self.dead_lettered,
            "bytes_written": self.bytes_written,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KafkaSinkCommitMessage:
        """Inverse of ``to_dict``."""
        handle_raw = raw["handle"]
        return cls(
            write_partition=int(raw["write_partition"]),
            attempt=int(raw["attempt"]),
            handle=None
            if handle_raw is None
            else TransactionHandle.from_json(json.dumps(handle_raw)),
            records_written=int(raw["records_written"]),
            dead_lettered=int(raw["dead_lettered"]),
            bytes_written=int(raw.get("bytes_written", 0)),
        )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _row_headers(batch: pa.RecordBatch) -> Iterable[list[tuple[str, bytes | None]] | None]:
    """Each row's headers as producer tuples (None for none); a repeat of None when the
    batch has no headers column or only nulls, the usual case, so no row pays for it."""
    if "headers" not in batch.schema.names:
        return itertools.repeat(None)
    column = batch.column("headers")
    if column.null_count == batch.num_rows:
        return itertools.repeat(None)
    return [[(h["key"], h["value"]) for h in row] if row else None for row in column.to_pylist()]


def _timestamps_ms(batch: pa.RecordBatch) -> Iterable[int]:
    """Each row's Kafka timestamp in ms, 0 where the producer should stamp it (null or not
    positive); a repeat of 0 when the batch has none."""
    if "timestamp" not in batch.schema.names:
        return itertools.repeat(0)
    column = batch.column("timestamp")
    if column.null_count == batch.num_rows:
        return itertools.repeat(0)
    millis = pc.divide(column.cast(pa.int64()), 1000)
    positive = pc.if_else(pc.greater(millis, 0), millis, 0)
    return pc.fill_null(positive, 0).to_pylist()  # type: ignore[no-any-return]


def _total_bytes(batch: pa.RecordBatch, name: str) -> int:
    """Bytes of a binary column, nulls counting 0 (bytes_written's share of it)."""
    if name not in batch.schema.names:
        return 0
    total = pc.sum(pc.binary_length(batch.column(name))).as_py()
    return int(total or 0)


class _PartitionWriter:
    """Writes one Spark partition's rows through one producer."""

    def __init__(self, options: SinkOptions, write_partition: int) -> None:
        self._options = options
        self._write_partition = write_partition
        url = options.schema_registry_url
        self._key_codec: RecordCodec = codec_for(options.key_format, schema_registry_url=url)
        self._value_codec: RecordCodec = codec_for(
            options.value_format, schema_registry_url=url, subject=f"{options.topic}-value"
        )
        self._producer: Producer | None = None
        self._txn: Any = None
        self._delivery_errors: list[str] = []
        self.records_written = 0
        self.bytes_written = 0
        self.dead_lettered = 0

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None and len(self._delivery_errors) < 5:
            self._delivery_errors.append(f"{msg.topic()}: {error.str()}")

    def _producer_config(self) -> dict[str, Any]:
        return {
            # murmur2 on the key bytes, as the Java client's default partitioner.
            "partitioner": "murmur2_random",
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "delivery.report.only.error": True,
            **self._options.batching.producer_config(),
            **self._options.resolved_properties(),
            "on_delivery": self._on_delivery,
        }

    def _ensure_producer(self) -> Producer:
        if self._producer is not None:
            return self._producer
        options = self._options
        if options.delivery is Delivery.EXACTLY_ONCE:
            transactional_id = transactional_id_for(
                options.transactional_id_prefix, self._write_partition
            )
            # This runs in a Spark Python worker: its failpoints come from the environment
            # it inherited from the executor.
            Failpoints.from_env().reach(
                Failpoint.BEFORE_INIT_TRANSACTIONS, detail=f"transactional.id {transactional_id}"
            )
            txn, _ = open_transactional_producer(
                bootstrap_servers=options.bootstrap_servers,
                transactional_id=transactional_id,
                transaction_timeout_ms=options.transaction_timeout_ms,
                config=self._producer_config(),
            )
            txn.producer.begin_transaction()
            self._txn = txn
            self._producer = txn.producer
        else:
            self._producer = Producer(
                {
                    "bootstrap.servers": options.bootstrap_servers,
                    "enable.idempotence": True,
                    "acks": "all",
                    **self._producer_config(),
                }
            )
        return self._producer

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        timestamp_ms: int,
    ) -> None:
        """Produce one record, serving delivery reports while the local queue is full;
        ``timestamp_ms`` 0 lets the producer stamp it."""
        producer = self._ensure_producer()
        while True:
            try:
                # Only the arguments in use: each keyword costs about a µs per record.
                if headers:
                    # (list is invariant: the stub's header values also admit str)
                    producer.produce(
                        topic,
                        value,
                        key,
                        timestamp=timestamp_ms,
                        headers=headers,  # type: ignore[arg-type]
                    )
                elif timestamp_ms:
                    producer.produce(topic, value, key, timestamp=timestamp_ms)
                else:
                    producer.produce(topic, value, key)
                return
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                producer.poll(0.05)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Produce every row of one Arrow batch, in order."""
        names = batch.schema.names
        rows = batch.num_rows
        keys = batch.column("key").to_pylist() if "key" in names else [None] * rows
        values = batch.column("value").to_pylist()
        headers = _row_headers(batch)
        timestamps = _timestamps_ms(batch)
        target_column = batch.column(TARGET_TOPIC_COLUMN) if TARGET_TOPIC_COLUMN in names else None
        if (target_column is None or target_column.null_count == rows) and self._passthrough(batch):
            # The common case, vectorised where it can be: no dead letter, bytes as they are.
            self._produce_all(keys, values, headers, timestamps)
            self.records_written += rows
            self.bytes_written += _total_bytes(batch, "key") + _total_bytes(batch, "value")
            return
        targets = target_column.to_pylist() if target_column is not None else [None] * rows
        where = {
            column: batch.column(column).to_pylist()
            for column in ("topic", "partition", "offset")
            if column in names
        }
        for i, (key_in, value_in, row_headers, timestamp, target) in enumerate(
            zip(keys, values, headers, timestamps, targets, strict=False)
        ):
            if target is not None:
                # Already a dead letter (from the source side): passed through untouched.
                self._produce(target, key_in, value_in, row_headers, timestamp)
                self.dead_lettered += 1
                continue
            try:
                key = self._key_codec.encode(key_in)
                value = self._value_codec.encode(value_in)
            except DecodeFailure as exc:
                self._on_bad_record(
                    str(exc),
                    raw_key=key_in,
                    raw_value=value_in,
                    headers=row_headers,
                    topic=where["topic"][i] if "topic" in where else None,
                    partition=_int_or_none(where["partition"][i]) if "partition" in where else None,
                    offset=_int_or_none(where["offset"][i]) if "offset" in where else None,
                )
                continue
            self._produce(self._options.topic, key, value, row_headers, timestamp)
            self.records_written += 1
            self.bytes_written += (len(key) if key else 0) + (len(value) if value else 0)

    def _passthrough(self, batch: pa.RecordBatch) -> bool:
        """Whether every key and value goes to Kafka as it is: binary columns under the
        bytes format, whose codec returns bytes unchanged."""
        schema = batch.schema
        return all(
            fmt is RecordFormat.BYTES
            and (name not in schema.names or pa.types.is_binary(schema.field(name).type))
            for name, fmt in (
                ("key", self._options.key_format),
                ("value", self._options.value_format),
            )
        )

    def _produce_all(
        self,
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: Iterable[list[tuple[str, bytes | None]] | None],
        timestamps: Iterable[int],
    ) -> None:
        """Produce rows to the sink topic as they are; the per-record hot loop."""
        producer = self._ensure_producer()
        produce, topic, slow = producer.produce, self._options.topic, self._produce
        if isinstance(headers, itertools.repeat) and isinstance(timestamps, itertools.repeat):
            for key, value in zip(keys, values, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:
                    slow(topic, key, value, None, 0)
            return
        for key, value, row_headers, timestamp in zip(
            keys, values, headers, timestamps, strict=False
        ):
            if row_headers:
                slow(topic, key, value, row_headers, timestamp)
                continue
            try:
                produce(topic, value, key, timestamp=timestamp)
            except BufferError:
                slow(topic, key, value, None, timestamp)

    def _on_bad_record(
        self,
        reason: str,
        *,
        raw_key: bytes | str | None,
        raw_value: bytes | str | None,
        headers: list[tuple[str, bytes | None]] | None,
        topic: str | None,
        partition: int | None,
        offset: int | None,
    ) -> None:
        reason = f"sink.kafka.format {self._options.value_format.value}: {reason}"
        dead_letter_topic = self._options.dead_letter_topic
        if self._options.tolerance is ErrorTolerance.NONE or dead_letter_topic is None:
            location = RecordLocation(topic or "?", partition or -1, offset or -1)
            raise WorkerRecordError(RecordError(location, reason))
        error_headers = dead_letter_headers(
            topic=topic, partition=partition, offset=offset, reason=reason, stage="sink"
        )
        self._produce(
            dead_letter_topic,
            raw_key.encode() if isinstance(raw_key, str) else raw_key,
            raw_value.encode() if isinstance(raw_value, str) else raw_value,
            (headers or []) + error_headers,
            0,
        )
        self.dead_lettered += 1

    def precommit(self, attempt: int) -> KafkaSinkCommitMessage:
        """Flush everything; for exactly_once return the open transaction's handle."""
        handle: TransactionHandle | None = None
        if self._txn is not None:
            handle = self._txn.precommit()
        elif self._producer is not None:
            remaining = self._producer.flush(60)
            if remaining:
                raise SinkError(f"{remaining} records were not delivered within 60s")
        if self._delivery_errors:
            raise SinkError("records could not be delivered: " + "; ".join(self._delivery_errors))
        if self._txn is not None:
            self._txn.release_without_abort()
        self._txn = None
        self._producer = None
        return KafkaSinkCommitMessage(
            write_partition=self._write_partition,
            attempt=attempt,
            handle=handle,
            records_written=self.records_written,
            dead_lettered=self.dead_lettered,
            bytes_written=self.bytes_written,
        )

    def abandon(self) -> None:
        """Best effort after a failure: abort the open transaction so nothing lingers."""
        if self._txn is not None:
            # Best effort only: the retry or the job's abort() fences it anyway.
            with contextlib.suppress(Exception):
                self._txn.producer.abort_transaction(10)
        self._txn = None
        self._producer = None


def dead_letter_headers(
    *, topic: str | None, partition: int | None, offset: int | None, reason: str, stage: str
) -> list[tuple[str, bytes | None]]:
    """Error headers of a dead-lettered record (topic/partition/offset only when known)."""
    headers: list[tuple[str, bytes | None]] = []
    if topic is not None:
        headers.append((ERROR_HEADER_TOPIC, topic.encode()))
    if partition is not None:
        headers.append((ERROR_HEADER_PARTITION, str(partition).encode()))
    if offset is not None:
        headers.append((ERROR_HEADER_OFFSET, str(offset).encode()))
    headers.append((ERROR_HEADER_REASON, reason.encode()))
    headers.append((ERROR_HEADER_STAGE, stage.encode()))
    return headers


def write_result_file(path: str, messages: list[KafkaSinkCommitMessage]) -> None:
    """Atomically write the commit messages as JSON (written by the Spark commit worker)."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".sink-result-")
    with os.fdopen(fd, "w") as out:
        json.dump([m.to_dict() for m in messages], out)
    os.replace(tmp, path)


def read_result_file(path: str) -> list[KafkaSinkCommitMessage]:
    """Read what ``write_result_file`` wrote."""
    with open(path) as src:
        return [KafkaSinkCommitMessage.from_dict(raw) for raw in json.load(src)]


class KafkaSinkWriter(DataSourceArrowWriter):
    """The batch writer: pre-commit in ``write``, hand over in ``commit``, clean up in ``abort``."""

    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaSinkCommitMessage:
        """Produce one partition inside one transaction and pre-commit it."""
        context = TaskContext.get()
        write_partition = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        writer = _PartitionWriter(self._options, write_partition)
        try:
            for batch in iterator:
                writer.write_batch(batch)
            return writer.precommit(attempt)
        except BaseException:
            writer.abandon()
            raise

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Record the handles for the executor; the coordinator commits them later."""
        if self._options.result_path is None:
            return
        kept = [m for m in messages if isinstance(m, KafkaSinkCommitMessage)]
        write_result_file(self._options.result_path, kept)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Abort this job's pre-committed transactions and fence partitions with no message."""
        if self._options.delivery is not Delivery.EXACTLY_ONCE:
            return
        for write_partition, message in enumerate(messages):
            if isinstance(message, KafkaSinkCommitMessage) and message.handle is not None:
                # Already ended or fenced: nothing of it can become visible either way.
                with contextlib.suppress(TransactionResumeError):
                    abort_transaction(
                        bootstrap_servers=self._options.bootstrap_servers,
                        handle=message.handle,
                        properties=self._options.resolved_properties(),
                    )
            else:
                fence_transactional_id(
                    bootstrap_servers=self._options.bootstrap_servers,
                    transactional_id=transactional_id_for(
                        self._options.transactional_id_prefix, write_partition
                    ),
                    properties=self._options.resolved_properties(),
                )


def fence_transactional_id(
    *, bootstrap_servers: str, transactional_id: str, properties: dict[str, str]
) -> None:
    """Abort whatever transaction ``transactional_id`` has open by re-initialising it.

    For ids whose handle was never reported (a crash before the pre-commit reply): only
    ``init_transactions`` can end such a transaction without knowing its epoch. Never
    call it on an id whose transaction may still need committing.
    """
    txn, _ = open_transactional_producer(
        bootstrap_servers=bootstrap_servers, transactional_id=transactional_id, config=properties
    )
    # No transaction is open after init_transactions, so close() has nothing to abort.
    txn.producer.flush(1)
    txn.release_without_abort()


class KafkaSink(DataSource):
    """``df.write.format("lockgate_kafka_sink")``: two-phase-commit Kafka writer."""

    @classmethod
    def name(cls) -> str:
        """The format name registered with Spark."""
        return "lockgate_kafka_sink"

    def writer(self, schema: StructType, overwrite: bool) -> KafkaSinkWriter:
        """A writer for a DataFrame with at least a ``value`` column."""
        if "value" not in schema.fieldNames():
            raise SinkError(
                "the Kafka sink needs a 'value' column (binary or string); the transform"
                f" produced only {', '.join(schema.fieldNames()) or 'no columns'}"
            )
        return KafkaSinkWriter(SinkOptions.parse(dict(self.options)))
