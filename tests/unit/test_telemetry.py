"""Telemetry configuration from OTEL_* variables, and what setup_telemetry builds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from lockgate.common.telemetry import (
    CONSOLE_PATH_ENV,
    ExporterKind,
    TelemetryConfigError,
    records_spans,
    setup_telemetry,
    telemetry_config_from_env,
)


def test_off_by_default() -> None:
    config = telemetry_config_from_env("coordinator", environ={})
    assert not config.traces_enabled
    assert not config.metrics_enabled
    telemetry = setup_telemetry("coordinator", environ={}, set_global=False)
    assert isinstance(telemetry.tracer_provider, trace.NoOpTracerProvider)
    assert telemetry.server_interceptors() == []
    with telemetry.span("checkpoint.trigger") as span:
        assert not span.is_recording()
    telemetry.shutdown()


@pytest.mark.parametrize(
    ("traces", "metrics", "expected_traces", "expected_metrics"),
    [
        ("console", "none", {ExporterKind.CONSOLE}, set()),
        ("otlp", "otlp", {ExporterKind.OTLP}, {ExporterKind.OTLP}),
        (
            "console, OTLP",
            "console",
            {ExporterKind.CONSOLE, ExporterKind.OTLP},
            {ExporterKind.CONSOLE},
        ),
        ("none", "none", set(), set()),
    ],
)
def test_exporters_from_env(
    traces: str,
    metrics: str,
    expected_traces: set[ExporterKind],
    expected_metrics: set[ExporterKind],
) -> None:
    config = telemetry_config_from_env(
        "executor",
        environ={"OTEL_TRACES_EXPORTER": traces, "OTEL_METRICS_EXPORTER": metrics},
    )
    assert config.traces_exporters == expected_traces
    assert config.metrics_exporters == expected_metrics


def test_sdk_disabled_wins() -> None:
    config = telemetry_config_from_env(
        "executor",
        environ={"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
    )
    assert not config.traces_enabled and not config.metrics_enabled


def test_service_name_override_and_instance_id() -> None:
    config = telemetry_config_from_env(
        "executor", service_instance_id="executor-3", environ={"OTEL_SERVICE_NAME": "exec-eu"}
    )
    assert config.service_name == "exec-eu"
    assert config.service_instance_id == "executor-3"
    assert telemetry_config_from_env("executor", environ={}).service_name == "executor"


def test_otlp_endpoint_per_signal_beats_generic() -> None:
    config = telemetry_config_from_env(
        "coordinator",
        environ={
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4317",
        },
    )
    assert config.traces_endpoint == "http://tempo:4317"
    assert config.metrics_endpoint == "http://collector:4317"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER='jaeger': unknown exporter"),
        ({"OTEL_METRICS_EXPORTER": "none,console"}, "'none' cannot be combined"),
        ({"OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED='maybe': expected true or false"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            "only OTLP over gRPC is installed",
        ),
        ({"OTEL_METRIC_EXPORT_INTERVAL": "soon"}, "OTEL_METRIC_EXPORT_INTERVAL='soon'"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector"},
            "expected a URL",
        ),
    ],
)
def test_bad_values_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(TelemetryConfigError, match=message.replace("(", r"\(")):
        telemetry_config_from_env("coordinator", environ=environ)


def test_console_traces_to_file_are_flushed_on_shutdown(tmp_path: Path) -> None:
    out = tmp_path / "spans.jsonl"
    telemetry = setup_telemetry(
        "coordinator",
        service_instance_id="coordinator-1",
        environ={"OTEL_TRACES_EXPORTER": "console", CONSOLE_PATH_ENV: str(out)},
        set_global=False,
    )
    assert isinstance(telemetry.tracer_provider, SdkTracerProvider)
    assert len(telemetry.server_interceptors()) == 1
    with (
        telemetry.span("checkpoint.decide", attributes={"lockgate.checkpoint_id": 7}),
        telemetry.span("sql.write_complete"),
    ):
        pass
    telemetry.shutdown()
    telemetry.shutdown()  # idempotent
    spans = [json.loads(line) for line in out.read_text().splitlines()]
    by_name = {span["name"]: span for span in spans}
    assert set(by_name) == {"checkpoint.decide", "sql.write_complete"}
    outer, inner = by_name["checkpoint.decide"], by_name["sql.write_complete"]
    assert inner["context"]["trace_id"] == outer["context"]["trace_id"]
    assert inner["parent_id"] == outer["context"]["span_id"]
    assert outer["attributes"]["lockgate.checkpoint_id"] == 7
    assert outer["resource"]["attributes"]["service.name"] == "coordinator"
    assert outer["resource"]["attributes"]["service.instance.id"] == "coordinator-1"


def test_console_metrics_to_file(tmp_path: Path) -> None:
    out = tmp_path / "metrics.jsonl"
    telemetry = setup_telemetry(
        "executor",
        environ={"OTEL_METRICS_EXPORTER": "console", CONSOLE_PATH_ENV: str(out)},
        set_global=False,
    )
    counter = telemetry.meter().create_counter("lockgate.records.written", unit="{record}")
    counter.add(41)
    counter.add(1)
    telemetry.shutdown()  # collects and exports once more
    text = out.read_text()
    assert "lockgate.records.written" in text
    points = [
        point["value"]
        for line in text.splitlines()
        for rm in json.loads(line)["resource_metrics"]
        for sm in rm["scope_metrics"]
        for metric in sm["metrics"]
        if metric["name"] == "lockgate.records.written"
        for point in metric["data"]["data_points"]
    ]
    assert points and points[-1] == 42


def test_span_records_exception(tmp_path: Path) -> None:
    out = tmp_path / "spans.jsonl"
    telemetry = setup_telemetry(
        "executor",
        environ={"OTEL_TRACES_EXPORTER": "console", CONSOLE_PATH_ENV: str(out)},
        set_global=False,
    )
    with pytest.raises(ValueError), telemetry.span("checkpoint.precommit"):
        raise ValueError("broker down")
    telemetry.shutdown()
    (span,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert span["status"]["status_code"] == "ERROR"
    assert span["events"][0]["name"] == "exception"


def test_records_spans_tells_a_tracer_that_records_from_one_that_cannot() -> None:
    assert not records_spans(trace.NoOpTracerProvider().get_tracer("off"))
    assert records_spans(SdkTracerProvider().get_tracer("on"))


def test_the_global_proxy_records_spans_once_a_tracer_provider_is_set() -> None:
    """In a process of its own: a tracer provider can be set once per process."""
    check = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from lockgate.common.telemetry import records_spans
        proxy = trace.get_tracer("lockgate.test")
        assert isinstance(proxy, trace.ProxyTracer), type(proxy)
        assert not records_spans(proxy)
        trace.set_tracer_provider(TracerProvider())
        assert records_spans(proxy)
        print("checked")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "checked", done.stderr
