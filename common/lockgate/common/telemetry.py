"""OpenTelemetry traces and metrics for every Lockgate service, off unless asked for.

Configuration comes from the standard environment variables, so operators use what they
already know from other OpenTelemetry-instrumented software:

- ``OTEL_SDK_DISABLED=true`` turns everything off, whatever else is set (a service's
  ``--metrics-listen`` endpoint too: it logs a warning and does not listen).
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: comma-separated list of
  ``none`` | ``console`` | ``otlp``. Unlike the OpenTelemetry default (``otlp``), Lockgate
  defaults to ``none``: a user who did not ask for telemetry pays nothing and sees no
  "cannot reach collector" noise.
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the per-signal ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
  ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``): the collector, OTLP over gRPC only.
- ``OTEL_SERVICE_NAME`` overrides the service name given by the code.
- ``OTEL_METRIC_EXPORT_INTERVAL``: milliseconds between metric exports (default 60000).
- ``LOCKGATE_TELEMETRY_CONSOLE_PATH`` (Lockgate's own): write the ``console`` exporters'
  output to this file instead of stdout, one JSON object per line.

Traces propagate between services as W3C ``traceparent`` gRPC metadata through the
interceptors of ``opentelemetry-instrumentation-grpc``; ``lockgate.common.grpc_server`` and
``lockgate.common.grpc_client`` install them, so a checkpoint shows as one trace across the
coordinator and the executors.
"""

from __future__ import annotations

import enum
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

import grpc
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.grpc import client_interceptor, filters, server_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.util.types import Attributes

CONSOLE_PATH_ENV = "LOCKGATE_TELEMETRY_CONSOLE_PATH"
_INSTRUMENTATION_NAME = "lockgate"
_DEFAULT_METRIC_INTERVAL_MS = 60_000
_TRUE_VALUES = frozenset({"true", "1", "yes", "on"})
_FALSE_VALUES = frozenset({"false", "0", "no", "off", ""})


class TelemetryConfigError(ValueError):
    """An ``OTEL_*`` environment variable has a value Lockgate cannot use."""


class ExporterKind(enum.Enum):
    """Where a signal (traces or metrics) is exported."""

    CONSOLE = "console"
    OTLP = "otlp"


@dataclass(frozen=True)
class TelemetryConfig:
    """What ``setup_telemetry`` will configure, parsed from the environment."""

    service_name: str
    service_instance_id: str
    traces_exporters: frozenset[ExporterKind]
    metrics_exporters: frozenset[ExporterKind]
    # None: the OTLP exporter's default (http://localhost:4317).
    traces_endpoint: str | None
    metrics_endpoint: str | None
    console_path: str | None
    metric_export_interval_ms: int

    @property
    def traces_enabled(self) -> bool:
        """True if spans are recorded and exported somewhere."""
        return bool(self.traces_exporters)

    @property
    def metrics_enabled(self) -> bool:
        """True if metrics are recorded and exported somewhere."""
        return bool(self.metrics_exporters)


def _parse_exporters(variable: str, environ: Mapping[str, str]) -> frozenset[ExporterKind]:
    raw = environ.get(variable, "none")
    kinds: set[ExporterKind] = set()
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    for name in names:
        if name == "none":
            continue
        try:
            kinds.add(ExporterKind(name))
        except ValueError:
            raise TelemetryConfigError(
                f"{variable}={raw!r}: unknown exporter {name!r}; "
                "use a comma-separated list of none, console, otlp"
            ) from None
    if "none" in names and kinds:
        raise TelemetryConfigError(
            f"{variable}={raw!r}: 'none' cannot be combined with other exporters"
        )
    return frozenset(kinds)


def _check_otlp_protocol(signal: str, environ: Mapping[str, str]) -> None:
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = environ.get(variable)
        if value is not None:
            if value.strip().lower() != "grpc":
                raise TelemetryConfigError(
                    f"{variable}={value!r}: only OTLP over gRPC is installed; "
                    "set it to 'grpc' or unset it"
                )
            return


def _endpoint(signal: str, environ: Mapping[str, str]) -> str | None:
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = environ.get(variable, "").strip()
        if value:
            if "://" not in value and ":" not in value:
                raise TelemetryConfigError(
                    f"{variable}={value!r}: expected a URL such as http://collector:4317"
                )
            return value
    return None


def telemetry_config_from_env(
    service_name: str,
    *,
    service_instance_id: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> TelemetryConfig:
    """Parse the ``OTEL_*`` variables (``os.environ`` unless ``environ`` is given).

    Raises ``TelemetryConfigError`` naming the variable and the accepted values.
    """
    env = os.environ if environ is None else environ
    name = env.get("OTEL_SERVICE_NAME", "").strip() or service_name
    if not name:
        raise TelemetryConfigError("service name is empty; pass one or set OTEL_SERVICE_NAME")
    instance_id = service_instance_id or uuid.uuid4().hex

    disabled_raw = env.get("OTEL_SDK_DISABLED", "false").strip().lower()
    if disabled_raw not in _TRUE_VALUES | _FALSE_VALUES:
        raise TelemetryConfigError(
            f"OTEL_SDK_DISABLED={env['OTEL_SDK_DISABLED']!r}: expected true or false"
        )
    interval_raw = env.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    try:
        interval_ms = int(interval_raw) if interval_raw else _DEFAULT_METRIC_INTERVAL_MS
    except ValueError:
        interval_ms = -1
    if interval_ms <= 0:
        raise TelemetryConfigError(
            f"OTEL_METRIC_EXPORT_INTERVAL={interval_raw!r}: expected a positive number of "
            "milliseconds"
        )

    if disabled_raw in _TRUE_VALUES:
        traces: frozenset[ExporterKind] = frozenset()
        metric_kinds: frozenset[ExporterKind] = frozenset()
    else:
        traces = _parse_exporters("OTEL_TRACES_EXPORTER", env)
        metric_kinds = _parse_exporters("OTEL_METRICS_EXPORTER", env)
    if ExporterKind.OTLP in traces:
        _check_otlp_protocol("TRACES", env)
    if ExporterKind.OTLP in metric_kinds:
        _check_otlp_protocol("METRICS", env)
    console_path = env.get(CONSOLE_PATH_ENV, "").strip() or None
    return TelemetryConfig(
        service_name=name,
        service_instance_id=instance_id,
        traces_exporters=traces,
        metrics_exporters=metric_kinds,
        traces_endpoint=_endpoint("TRACES", env) if ExporterKind.OTLP in traces else None,
        metrics_endpoint=_endpoint("METRICS", env) if ExporterKind.OTLP in metric_kinds else None,
        console_path=console_path,
        metric_export_interval_ms=interval_ms,
    )


class _ConsoleSink:
    """Where console exporters write: stdout, or a file shared by traces and metrics."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._path = path

    def stream(self) -> IO[str]:
        with self._lock:
            if self._path is None:
                return sys.stdout
            if self._file is None:
                # Append: several processes (or several setups in one) may share the file;
                # each write is one whole line, so lines never interleave mid-record.
                self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
            return self._file

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _span_line(span: ReadableSpan) -> str:
    # One compact JSON object per line: easy to grep, tail and parse.
    return json.dumps(json.loads(span.to_json()), separators=(",", ":")) + "\n"


def _metrics_line(data: Any) -> str:
    return json.dumps(json.loads(data.to_json()), separators=(",", ":")) + "\n"


class Telemetry:
    """The tracer and meter providers of one service process, and its gRPC interceptors.

    Use as a context manager or call ``shutdown()`` before exit: it flushes pending spans
    and metrics.
    """

    def __init__(
        self,
        config: TelemetryConfig,
        *,
        tracer_provider: trace.TracerProvider,
        meter_provider: metrics.MeterProvider,
        console_sink: _ConsoleSink | None = None,
    ) -> None:
        self.config = config
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._console_sink = console_sink
        self._shutdown_lock = threading.Lock()
        self._is_shut_down = False

    @classmethod
    def disabled(cls, service_name: str) -> Telemetry:
        """Telemetry that records nothing (no-op providers, no interceptors)."""
        config = TelemetryConfig(
            service_name=service_name,
            service_instance_id=uuid.uuid4().hex,
            traces_exporters=frozenset(),
            metrics_exporters=frozenset(),
            traces_endpoint=None,
            metrics_endpoint=None,
            console_path=None,
            metric_export_interval_ms=_DEFAULT_METRIC_INTERVAL_MS,
        )
        return cls(
            config,
            tracer_provider=trace.NoOpTracerProvider(),
            meter_provider=metrics.NoOpMeterProvider(),
        )

    def tracer(self, name: str = _INSTRUMENTATION_NAME) -> trace.Tracer:
        """A tracer for spans of internal work (``name`` is the instrumenting module)."""
        return self.tracer_provider.get_tracer(name)

    @property
    def records_metrics(self) -> bool:
        """True if metrics go somewhere (an ``OTEL_METRICS_EXPORTER`` or ``/metrics``)."""
        return isinstance(self.meter_provider, SdkMeterProvider)

    def meter(self, name: str = _INSTRUMENTATION_NAME) -> metrics.Meter:
        """A meter to create counters and histograms (``name`` is the instrumenting module)."""
        return self.meter_provider.get_meter(name)

    @contextmanager
    def span(
        self,
        name: str,
        *,
        attributes: Attributes = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    ) -> Iterator[trace.Span]:
        """Run a block of internal work (e.g. ``checkpoint.precommit``) as the current span.

        An exception escaping the block is recorded on the span and marks it as an error.
        """
        with self.tracer().start_as_current_span(name, kind=kind, attributes=attributes) as s:
            yield s

    def server_interceptors(self) -> list[grpc.ServerInterceptor]:
        """Interceptors that continue the caller's trace in a SERVER span (none when off).

        Health checks and reflection are not traced: probes would drown the real calls.
        """
        if not self.config.traces_enabled:
            return []
        interceptor: grpc.ServerInterceptor = server_interceptor(  # type: ignore[no-untyped-call]
            tracer_provider=self.tracer_provider, filter_=_not_probe()
        )
        return [interceptor]

    def intercept_channel(self, channel: grpc.Channel) -> grpc.Channel:
        """Wrap a channel so each call runs in a CLIENT span whose context travels to the
        server as ``traceparent`` metadata (unchanged when tracing is off)."""
        if not self.config.traces_enabled:
            return channel
        interceptor = client_interceptor(  # type: ignore[no-untyped-call]
            tracer_provider=self.tracer_provider
        )
        wrapped: grpc.Channel = intercept_channel(  # type: ignore[no-untyped-call]
            channel, interceptor
        )
        return wrapped

    def shutdown(self) -> None:
        """Flush and stop the exporters; idempotent."""
        with self._shutdown_lock:
            if self._is_shut_down:
                return
            self._is_shut_down = True
        if isinstance(self.tracer_provider, SdkTracerProvider):
            self.tracer_provider.shutdown()
        if isinstance(self.meter_provider, SdkMeterProvider):
            self.meter_provider.shutdown()
        if self._console_sink is not None:
            self._console_sink.close()

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()


def _not_probe() -> Any:
    return filters.negate(
        filters.any_of(
            filters.service_prefix("grpc.health.v1.Health"),
            filters.service_prefix("grpc.reflection."),
        )
    )


def _span_exporters(config: TelemetryConfig, sink: _ConsoleSink) -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    if ExporterKind.CONSOLE in config.traces_exporters:
        exporters.append(ConsoleSpanExporter(out=sink.stream(), formatter=_span_line))
    if ExporterKind.OTLP in config.traces_exporters:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter(endpoint=config.traces_endpoint))
    return exporters


def _metric_readers(config: TelemetryConfig, sink: _ConsoleSink) -> list[MetricReader]:
    exporters: list[MetricExporter] = []
    if ExporterKind.CONSOLE in config.metrics_exporters:
        exporters.append(ConsoleMetricExporter(out=sink.stream(), formatter=_metrics_line))
    if ExporterKind.OTLP in config.metrics_exporters:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        exporters.append(OTLPMetricExporter(endpoint=config.metrics_endpoint))
    return [
        PeriodicExportingMetricReader(
            exporter, export_interval_millis=config.metric_export_interval_ms
        )
        for exporter in exporters
    ]


def setup_telemetry(
    service_name: str,
    *,
    service_instance_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    set_global: bool = True,
    metric_readers: Sequence[MetricReader] = (),
) -> Telemetry:
    """Configure traces and metrics for one service process from the ``OTEL_*`` variables.

    ``metric_readers`` are added to the ``OTEL_METRICS_EXPORTER`` ones (the Prometheus
    endpoint's reader, ``lockgate.common.prometheus``); any of them turns metrics on.
    With nothing set, returns no-op telemetry (no exporter, no interceptor). With
    ``set_global`` the providers also become OpenTelemetry's global ones, so libraries
    instrumented with the plain API report into them; OpenTelemetry allows that once per
    process, later calls keep the first providers as the globals.
    """
    config = telemetry_config_from_env(
        service_name, service_instance_id=service_instance_id, environ=environ
    )
    metrics_on = config.metrics_enabled or bool(metric_readers)
    if not config.traces_enabled and not metrics_on:
        disabled = Telemetry.disabled(config.service_name)
        return Telemetry(
            config,
            tracer_provider=disabled.tracer_provider,
            meter_provider=disabled.meter_provider,
        )
    resource = Resource.create(
        {
            SERVICE_NAME: config.service_name,
            SERVICE_INSTANCE_ID: config.service_instance_id,
            "service.namespace": "lockgate",
        }
    )
    sink = _ConsoleSink(config.console_path)
    tracer_provider: trace.TracerProvider
    if config.traces_enabled:
        sdk_tracer_provider = SdkTracerProvider(resource=resource)
        for exporter in _span_exporters(config, sink):
            sdk_tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        tracer_provider = sdk_tracer_provider
    else:
        tracer_provider = trace.NoOpTracerProvider()
    meter_provider: metrics.MeterProvider
    if metrics_on:
        meter_provider = SdkMeterProvider(
            resource=resource,
            metric_readers=[*_metric_readers(config, sink), *metric_readers],
        )
    else:
        meter_provider = metrics.NoOpMeterProvider()
    if set_global:
        if config.traces_enabled:
            trace.set_tracer_provider(tracer_provider)
        if metrics_on:
            metrics.set_meter_provider(meter_provider)
    return Telemetry(
        config,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        console_sink=sink,
    )


def current_trace_id() -> str | None:
    """The current span's trace id as 32 hex digits (for log lines), or None outside a trace."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id)


def records_spans(tracer: trace.Tracer) -> bool:
    """Whether spans of `tracer` can be recorded: False for a no-op tracer, and for the
    global proxy (`trace.get_tracer`) while no tracer provider is set, which is how a
    service runs with traces off. A path run per task or per report skips building its
    spans then: made, entered and ended for nothing, they were 4-6% of the leader's and
    the executors' CPU in the round-trip bench (issue 14)."""
    if isinstance(tracer, trace.NoOpTracer):
        return False
    if isinstance(tracer, trace.ProxyTracer):
        provider = trace.get_tracer_provider()
        return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    return True


__all__ = [
    "CONSOLE_PATH_ENV",
    "ExporterKind",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryConfigError",
    "current_trace_id",
    "records_spans",
    "setup_telemetry",
    "telemetry_config_from_env",
]
