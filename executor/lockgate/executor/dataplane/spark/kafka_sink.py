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

This module is the planning and commit half, imported by Spark's planner and commit workers
to unpickle ``KafkaSink``; the producing half (``kafka_sink_write.py``, with pyarrow and
confluent-kafka) is imported only by the task that writes and by a job's ``abort``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from lockgate.common.kafka_config import resolve_properties
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, RecordFormat
from lockgate.common.model.producer_batching import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_COMPRESSION,
    DEFAULT_LINGER_MS,
    Compression,
    ProducerBatching,
)
from lockgate.executor.errors import SinkError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

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
        # Here, not at the top: the planner and commit workers that unpickle this module
        # never produce (so they load neither pyarrow nor librdkafka).
        from lockgate.executor.dataplane.spark.kafka_sink_write import PartitionWriter

        context = TaskContext.get()
        write_partition = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        writer = PartitionWriter(self._options, write_partition)
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
        from lockgate.common.kafka_transactions import TransactionResumeError, abort_transaction
        from lockgate.executor.dataplane.spark.kafka_sink_write import fence_transactional_id

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
