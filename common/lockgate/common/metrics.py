"""Every metric Lockgate exports, named once: the table the README, the dashboard and the
code all read.

Names follow OpenTelemetry's semantic-convention style (``lockgate.<thing>.<measure>``,
units in UCUM: ``s``, ``{record}``), and gRPC server calls use OpenTelemetry's own
``rpc.server.duration``. The Prometheus endpoint (``lockgate.common.prometheus``) shows them
the exporter's way: dots become underscores, counters get ``_total``, a unit in seconds
becomes a ``_seconds`` suffix, and ``{...}`` annotations are dropped (``lockgate.checkpoints``
is ``lockgate_checkpoints_total``, ``lockgate.checkpoint.duration`` is
``lockgate_checkpoint_duration_seconds``); :func:`prometheus_names` spells them.

A service records through :class:`Instruments`, built on its ``Telemetry.meter()``: with
metrics off the meter is a no-op and so is every call. Counts are added per batch or per
checkpoint, never per record, so the per-record path has no metric call.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation


class MetricKind(enum.Enum):
    """How a metric is recorded, and so how Prometheus shows it."""

    COUNTER = "counter"
    """Only grows (Prometheus: ``<name>_total``)."""
    HISTOGRAM = "histogram"
    """A distribution (Prometheus: ``_bucket``, ``_sum``, ``_count``)."""
    GAUGE = "gauge"
    """A value read when metrics are collected (Prometheus: the name as it is)."""


@dataclass(frozen=True)
class MetricDefinition:
    """One metric: its stable name, unit, meaning, attributes and the service recording it."""

    name: str
    kind: MetricKind
    unit: str
    description: str
    attributes: tuple[str, ...]
    service: str


_C, _E, _R, _ALL = "coordinator", "executor", "schema registry", "every service"

CHECKPOINTS = MetricDefinition(
    "lockgate.checkpoints",
    MetricKind.COUNTER,
    "{checkpoint}",
    "Checkpoints that reached a final state: `state` committed, aborted or data_lost, and "
    "for an abort its `abort_reason` (timeout, trigger_failed, task_failed, leader_changed, "
    "pipeline_stopped, pipeline_deleted, task_reassigned, task_restarted, other; none when "
    "committed). A checkpoint aborted because an earlier one did carries the earlier one's "
    "reason.",
    ("pipeline", "state", "abort_reason"),
    _C,
)
CHECKPOINT_DURATION = MetricDefinition(
    "lockgate.checkpoint.duration",
    MetricKind.HISTOGRAM,
    "s",
    "How long a committed checkpoint took, by `phase`: trigger_to_complete (trigger until "
    "every task pre-committed and COMPLETE was written) and complete_to_committed (COMPLETE "
    "until every executor acked the commit); database clock.",
    ("pipeline", "phase"),
    _C,
)
SOURCE_LAG = MetricDefinition(
    "lockgate.source.lag",
    MetricKind.GAUGE,
    "{record}",
    "Records of a source partition not yet in a COMPLETE checkpoint: the partition's log "
    "end offset under read_committed minus the offset the pipeline resumes from. Measured "
    "by the leader every few seconds.",
    ("pipeline", "topic", "partition"),
    _C,
)
COMMIT_RETRIES = MetricDefinition(
    "lockgate.commit.retries",
    MetricKind.COUNTER,
    "{retry}",
    "Commit calls of a COMPLETE checkpoint that an executor did not ack; the leader retries "
    "each with backoff until it is acked.",
    ("pipeline",),
    _C,
)
LEADER_EPOCH = MetricDefinition(
    "lockgate.leader.epoch",
    MetricKind.GAUGE,
    "{epoch}",
    "The leader epoch (fencing token) of the newest lease this replica has read; grows by "
    "one on every change of leader.",
    (),
    _C,
)
LEASE_RENEWALS = MetricDefinition(
    "lockgate.lease.renewals",
    MetricKind.COUNTER,
    "{renewal}",
    "Lease attempts of a replica that leads or just led, by `outcome`: renewed (it still "
    "leads), lost (another replica holds the lease), error (the database did not answer).",
    ("outcome",),
    _C,
)
LEADER_FAILOVERS = MetricDefinition(
    "lockgate.leader.failovers",
    MetricKind.COUNTER,
    "{failover}",
    "Times this replica became leader (a new leader epoch); the first election counts too. "
    "Summed over the replicas: changes of leader.",
    (),
    _C,
)
EXECUTOR_SESSIONS = MetricDefinition(
    "lockgate.executor.sessions",
    MetricKind.GAUGE,
    "{session}",
    "Executor sessions the leader knows, by `state`: alive (heartbeat within the session "
    "timeout) or expired. Only the leader reports it.",
    ("state",),
    _C,
)
TASKS = MetricDefinition(
    "lockgate.tasks",
    MetricKind.GAUGE,
    "{task}",
    "Tasks by observed `state` (unassigned, running, failed, ...), per pipeline. Only the "
    "leader reports it.",
    ("pipeline", "state"),
    _C,
)
TASK_RECORDS_READ = MetricDefinition(
    "lockgate.task.records.read",
    MetricKind.COUNTER,
    "{record}",
    "Source records a task read (dead letters included) in checkpoints it then committed, "
    "counted on the executor that ran the batch when the commit is acked.",
    ("pipeline", "task"),
    _E,
)
TASK_RECORDS_WRITTEN = MetricDefinition(
    "lockgate.task.records.written",
    MetricKind.COUNTER,
    "{record}",
    "Records a task wrote to its sink topic in checkpoints it then committed (counted when "
    "the commit is acked): with exactly_once, what read_committed readers see.",
    ("pipeline", "task"),
    _E,
)
TASK_BYTES_READ = MetricDefinition(
    "lockgate.task.read.size",
    MetricKind.COUNTER,
    "By",
    "Bytes of the source records' keys and values a task read (dead letters included) in "
    "checkpoints it then committed, summed in the same Spark aggregate as the record count: "
    "bytes and string keys and values are sized; a value decoded into a structure (avro, "
    "json) counts 0.",
    ("pipeline", "task"),
    _E,
)
TASK_BYTES_WRITTEN = MetricDefinition(
    "lockgate.task.written.size",
    MetricKind.COUNTER,
    "By",
    "Bytes of the keys and values a task wrote to its sink topic (as encoded, headers "
    "excluded) in checkpoints it then committed.",
    ("pipeline", "task"),
    _E,
)
DEAD_LETTER_RECORDS = MetricDefinition(
    "lockgate.dead_letter.records",
    MetricKind.COUNTER,
    "{record}",
    "Records a task sent to its pipeline's dead-letter topic (errors.tolerance all), in "
    "committed checkpoints.",
    ("pipeline", "task"),
    _E,
)
PRECOMMIT_DURATION = MetricDefinition(
    "lockgate.task.precommit.duration",
    MetricKind.HISTOGRAM,
    "s",
    "From a trigger's arrival on the executor to the end of the task's pre-commit batch "
    "(Spark job included).",
    ("pipeline", "task"),
    _E,
)
VISIBILITY_LATENCY = MetricDefinition(
    "lockgate.visibility.latency",
    MetricKind.HISTOGRAM,
    "s",
    "End-to-end latency, from a record's Kafka timestamp until its checkpoint is committed "
    "(visible to read_committed readers). One value per task and committed checkpoint, "
    "from the batch's oldest record timestamp: the worst record of the batch.",
    ("pipeline",),
    _E,
)
REPORT_RETRIES = MetricDefinition(
    "lockgate.report.retries",
    MetricKind.COUNTER,
    "{retry}",
    "Reports to the leader (pre-commit, checkpoint failure, task failure) sent again after "
    "a transient failure.",
    ("report",),
    _E,
)
REGISTRY_LOOKUPS = MetricDefinition(
    "lockgate.registry.lookups",
    MetricKind.COUNTER,
    "{lookup}",
    "Schema lookups by global id, by `api` (grpc or rest) and `cache` (hit: served from "
    "memory; miss: read from the database). Hit ratio: hit / (hit + miss).",
    ("api", "cache"),
    _R,
)
RPC_SERVER_DURATION = MetricDefinition(
    "rpc.server.duration",
    MetricKind.HISTOGRAM,
    "s",
    "gRPC calls served, as OpenTelemetry's RPC semantic conventions: duration by "
    "`rpc.service`, `rpc.method` and `rpc.grpc.status_code` (0 OK, 3 INVALID_ARGUMENT, 14 "
    "UNAVAILABLE, ...). Health checks and reflection are left out.",
    ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code"),
    _ALL,
)

METRICS: tuple[MetricDefinition, ...] = (
    CHECKPOINTS,
    CHECKPOINT_DURATION,
    SOURCE_LAG,
    COMMIT_RETRIES,
    LEADER_EPOCH,
    LEASE_RENEWALS,
    LEADER_FAILOVERS,
    EXECUTOR_SESSIONS,
    TASKS,
    TASK_RECORDS_READ,
    TASK_RECORDS_WRITTEN,
    TASK_BYTES_READ,
    TASK_BYTES_WRITTEN,
    DEAD_LETTER_RECORDS,
    PRECOMMIT_DURATION,
    VISIBILITY_LATENCY,
    REPORT_RETRIES,
    REGISTRY_LOOKUPS,
    RPC_SERVER_DURATION,
)

#: Histogram buckets in seconds: checkpoints and latencies run from milliseconds to minutes.
SECONDS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0
)  # fmt: skip

_UNIT_SUFFIXES = {"s": "_seconds", "By": "_bytes"}


def prometheus_names(definition: MetricDefinition) -> tuple[str, ...]:
    """The series names the Prometheus endpoint shows for ``definition`` (its text format:
    a counter's ``_total``, a histogram's ``_bucket``, ``_sum`` and ``_count``)."""
    base = definition.name.replace(".", "_") + _UNIT_SUFFIXES.get(definition.unit, "")
    if definition.kind is MetricKind.COUNTER:
        return (f"{base}_total",)
    if definition.kind is MetricKind.HISTOGRAM:
        return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
    return (base,)


Attributes = Mapping[str, str | int]
GaugeReading = Callable[[], Iterable[tuple[float, Attributes]]]


class Instruments:
    """The instruments of one service process, created on first use from its meter.

    Thread-safe. ``add`` and ``record`` take a definition of this module, so a metric is
    named, typed and documented in one place only.
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self._meter = meter
        self._lock = threading.Lock()
        self._counters: dict[str, metrics.Counter] = {}
        self._histograms: dict[str, metrics.Histogram] = {}
        self._gauges: dict[str, metrics.ObservableGauge] = {}

    @classmethod
    def disabled(cls) -> Instruments:
        """Instruments that record nothing (tests, and services with metrics off)."""
        return cls(metrics.NoOpMeter("lockgate"))

    def add(self, definition: MetricDefinition, amount: int, attributes: Attributes) -> None:
        """Add ``amount`` to a counter (nothing for 0)."""
        if definition.kind is not MetricKind.COUNTER:
            raise TypeError(f"{definition.name} is a {definition.kind.value}, not a counter")
        if amount <= 0:
            return
        with self._lock:
            counter = self._counters.get(definition.name)
            if counter is None:
                counter = self._meter.create_counter(
                    definition.name, unit=definition.unit, description=definition.description
                )
                self._counters[definition.name] = counter
        counter.add(amount, dict(attributes))

    def record(self, definition: MetricDefinition, value: float, attributes: Attributes) -> None:
        """Record one value of a histogram."""
        if definition.kind is not MetricKind.HISTOGRAM:
            raise TypeError(f"{definition.name} is a {definition.kind.value}, not a histogram")
        with self._lock:
            histogram = self._histograms.get(definition.name)
            if histogram is None:
                histogram = self._meter.create_histogram(
                    definition.name,
                    unit=definition.unit,
                    description=definition.description,
                    explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS)
                    if definition.unit == "s"
                    else None,
                )
                self._histograms[definition.name] = histogram
        histogram.record(value, dict(attributes))

    def observe(self, definition: MetricDefinition, reading: GaugeReading) -> None:
        """Register the function that reads a gauge's values when metrics are collected
        (once per gauge; a second registration is refused)."""
        if definition.kind is not MetricKind.GAUGE:
            raise TypeError(f"{definition.name} is a {definition.kind.value}, not a gauge")

        def callback(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, dict(attrs)) for value, attrs in reading()]

        with self._lock:
            if definition.name in self._gauges:
                raise ValueError(f"{definition.name} already has a reading")
            self._gauges[definition.name] = self._meter.create_observable_gauge(
                definition.name,
                callbacks=[callback],
                unit=definition.unit,
                description=definition.description,
            )


__all__ = [
    "CHECKPOINTS",
    "CHECKPOINT_DURATION",
    "COMMIT_RETRIES",
    "DEAD_LETTER_RECORDS",
    "EXECUTOR_SESSIONS",
    "LEADER_EPOCH",
    "LEADER_FAILOVERS",
    "LEASE_RENEWALS",
    "METRICS",
    "PRECOMMIT_DURATION",
    "REGISTRY_LOOKUPS",
    "REPORT_RETRIES",
    "RPC_SERVER_DURATION",
    "SOURCE_LAG",
    "TASKS",
    "TASK_RECORDS_READ",
    "TASK_RECORDS_WRITTEN",
    "VISIBILITY_LATENCY",
    "Instruments",
    "MetricDefinition",
    "MetricKind",
    "prometheus_names",
]
