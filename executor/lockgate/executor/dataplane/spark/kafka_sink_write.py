"""The Kafka sink's producing half: one write partition's rows through one producer.

Imported only inside the Spark task that writes (``KafkaSinkWriter.write``) or a job's
``abort``, so Spark's Python planner and commit workers, which unpickle ``kafka_sink.py``,
load neither pyarrow nor librdkafka (about 60 MB of resident memory each, README issue 13).

An exactly_once write partition opens its own transactional producer each checkpoint (its
transaction outlives the batch, committed by its handle from another process). An
at_least_once one borrows a producer this Spark Python worker keeps between batches
(``AT_LEAST_ONCE_PRODUCERS``): a new idempotent producer waits for its producer id, and
librdkafka asks for it before any broker connection is up and retries 500 ms later, so a
producer per batch cost every batch about half a second at its flush (README, issue 13).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from confluent_kafka import KafkaError, Message, Producer

from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.kafka_transactions import open_transactional_producer
from lockgate.common.kept_clients import KeptClients
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, RecordFormat
from lockgate.executor.dataplane.spark.formats import DecodeFailure, RecordCodec, codec_for
from lockgate.executor.dataplane.spark.kafka_sink import (
    TARGET_TOPIC_COLUMN,
    KafkaSinkCommitMessage,
    SinkOptions,
    dead_letter_headers,
    transactional_id_for,
)
from lockgate.executor.errors import RecordError, RecordLocation, SinkError, WorkerRecordError


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


def column_bytes(batch: pa.RecordBatch, name: str) -> int:
    """Bytes of a binary or string column (its UTF-8 octets), nulls counting 0; 0 for a
    column the batch lacks."""
    if name not in batch.schema.names:
        return 0
    total = pc.sum(pc.binary_length(batch.column(name))).as_py()
    return int(total or 0)


#: What every sink producer is built with, before the pipeline's batching settings and its
#: `sink.kafka.properties` (which may override them).
_PRODUCER_BASE: dict[str, Any] = {
    # murmur2 on the key bytes, as the Java client's default partitioner.
    "partitioner": "murmur2_random",
    "batch.num.messages": 10_000,
    # The most records a producer holds unsent: a write partition's share of a checkpoint can
    # be 250,000 records or more (`max_records_per_partition`), and at 500,000 a copy's
    # executor peaked at 1,564 MB, at 100,000 at 1,411 MB, as fast (README, issue 13).
    "queue.buffering.max.messages": 100_000,
    "delivery.report.only.error": True,
}


@dataclass
class KeptProducer:
    """An at_least_once producer kept between batches, and the delivery errors of the batch
    that borrows it (cleared at each borrowing)."""

    producer: Producer
    delivery_errors: list[str]


def _kept_producer(bootstrap_servers: str, settings: Mapping[str, str]) -> KeptProducer:
    """An idempotent producer with ``settings``: the batching settings and the resolved
    `sink.kafka.properties`."""
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            **_PRODUCER_BASE,
            **settings,
            "on_delivery": lambda error, msg: _note_delivery(errors, error, msg),
        }
    )
    return KeptProducer(producer, errors)


def _note_delivery(errors: list[str], error: KafkaError | None, msg: Message) -> None:
    """Keep the first five delivery errors of a batch, naming each record's topic."""
    if error is not None and len(errors) < 5:
        errors.append(f"{msg.topic()}: {error.str()}")


def _close_kept(kept: KeptProducer) -> None:
    """Drop what it still holds (a failed batch's records, read again by its retry), then
    close it."""
    with contextlib.suppress(Exception):
        kept.producer.purge()
        kept.producer.close()


#: This worker's at_least_once producers, one per sink cluster and settings in use at a time
#: (`kept_clients`: rebuilt when a secret resolves to something else, dropped after a failed
#: batch, closed after 5 minutes unused).
AT_LEAST_ONCE_PRODUCERS: KeptClients[KeptProducer] = KeptClients(
    _kept_producer, close=_close_kept, shared=False
)


class PartitionWriter:
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
        # The borrowing of an at_least_once producer (`AT_LEAST_ONCE_PRODUCERS`), if any.
        self._borrowed: contextlib.AbstractContextManager[KeptProducer] | None = None
        self._opening: threading.Thread | None = None
        self._open_error: BaseException | None = None
        self._delivery_errors: list[str] = []
        self.records_written = 0
        self.bytes_written = 0
        self.dead_lettered = 0

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        _note_delivery(self._delivery_errors, error, msg)

    def _producer_config(self) -> dict[str, Any]:
        """The exactly_once producer's settings (its transactional ones aside)."""
        return {
            **_PRODUCER_BASE,
            **self._options.batching.producer_config(),
            **self._options.resolved_properties(),
            "on_delivery": self._on_delivery,
        }

    def open_early(self) -> None:
        """Open the exactly_once producer on a thread now: its first metadata answer and
        ``init_transactions`` are broker round trips (about 0.1 s) that then overlap
        the reader's first fetch instead of following it. The first write, or the
        pre-commit, waits for it and raises what it raised. Nothing to do for at_least_once,
        whose producer opens with no round trip."""
        if self._options.delivery is not Delivery.EXACTLY_ONCE or self._producer is not None:
            return

        def open_producer() -> None:
            try:
                self._open_producer()
            except BaseException as exc:  # raised again on the task's thread
                self._open_error = exc

        self._opening = threading.Thread(target=open_producer, name="open-producer", daemon=True)
        self._opening.start()

    def _opened(self) -> None:
        """Wait for ``open_early``'s thread, if any; raise what it raised."""
        opening, self._opening = self._opening, None
        if opening is None:
            return
        opening.join()
        error, self._open_error = self._open_error, None
        if error is not None:
            raise error

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            self._opened()  # open_early's thread, if any, may have opened it
        return self._producer if self._producer is not None else self._open_producer()

    def _open_producer(self) -> Producer:
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
            txn = open_transactional_producer(
                bootstrap_servers=options.bootstrap_servers,
                transactional_id=transactional_id,
                transaction_timeout_ms=options.transaction_timeout_ms,
                config=self._producer_config(),
                connect_via_topic=options.topic,
            )
            txn.producer.begin_transaction()
            self._txn = txn
            self._producer = txn.producer
        else:
            batching = {k: str(v) for k, v in options.batching.producer_config().items()}
            borrowed = AT_LEAST_ONCE_PRODUCERS.using(
                options.bootstrap_servers,
                {**batching, **options.kafka_properties},
                resolved={**batching, **options.resolved_properties()},
            )
            kept = borrowed.__enter__()
            self._borrowed = borrowed
            kept.delivery_errors.clear()
            self._delivery_errors = kept.delivery_errors
            self._producer = kept.producer
        return self._producer

    def _give_back(self, *, failed: bool) -> None:
        """End the borrowing of the at_least_once producer, if any: after a failure the
        pool drops it (and what it still holds)."""
        borrowed, self._borrowed = self._borrowed, None
        if borrowed is None:
            return
        if failed:
            error = SinkError("the batch failed")
            borrowed.__exit__(SinkError, error, None)
        else:
            borrowed.__exit__(None, None, None)

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
            # The common case: no dead letter, bytes as they are.
            size = column_bytes(batch, "key") + column_bytes(batch, "value")
            self.write_rows(keys, values, headers, timestamps, size=size)
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

    @property
    def passes_through(self) -> bool:
        """Whether the sink writes bytes keys and values as it gets them (no codec)."""
        return (
            self._options.key_format is RecordFormat.BYTES
            and self._options.value_format is RecordFormat.BYTES
        )

    def _passthrough(self, batch: pa.RecordBatch) -> bool:
        """Whether every key and value goes to Kafka as it is: binary columns under the
        bytes format, whose codec returns bytes unchanged."""
        schema = batch.schema
        return self.passes_through and all(
            name not in schema.names or pa.types.is_binary(schema.field(name).type)
            for name in ("key", "value")
        )

    def write_rows(
        self,
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: Iterable[list[tuple[str, bytes | None]] | None],
        timestamps: Iterable[int],
        *,
        size: int,
    ) -> None:
        """Produce rows to the sink topic as they are, in order: the per-record hot loop, for
        a sink that writes bytes keys and values (``passes_through``). ``headers`` and
        ``timestamps`` (ms, 0: the producer stamps) are a repeat of None and of 0 for rows
        that have none, which takes the producer's plainest call. ``size``: the rows' key
        and value bytes, as the caller counted them (it has them at hand: the chained copy
        from what it read, an Arrow batch from its columns)."""
        self.records_written += len(values)
        self.bytes_written += size
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
        """Flush everything; for exactly_once return the open transaction's handle (None if
        nothing was produced: a transaction opened early and left empty is aborted, which
        for an empty one is local, and reported as none)."""
        self._opened()
        handle: TransactionHandle | None = None
        if self._txn is not None and not (self.records_written or self.dead_lettered):
            self._txn.producer.abort_transaction(30)
            self._txn.release_without_abort()
            self._txn = self._producer = None
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
        self._give_back(failed=False)
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
        with contextlib.suppress(BaseException):
            self._opened()
        if self._txn is not None:
            # Best effort only: the retry or the job's abort() fences it anyway.
            with contextlib.suppress(Exception):
                self._txn.producer.abort_transaction(10)
        self._give_back(failed=True)
        self._txn = None
        self._producer = None


def fence_transactional_id(
    *, bootstrap_servers: str, transactional_id: str, properties: dict[str, str]
) -> None:
    """Abort whatever transaction ``transactional_id`` has open by re-initialising it.

    For ids whose handle was never reported (a crash before the pre-commit reply): only
    ``init_transactions`` can end such a transaction without knowing its epoch. Never
    call it on an id whose transaction may still need committing.
    """
    txn = open_transactional_producer(
        bootstrap_servers=bootstrap_servers, transactional_id=transactional_id, config=properties
    )
    # No transaction is open after init_transactions, so close() has nothing to abort.
    txn.producer.flush(1)
    txn.release_without_abort()
