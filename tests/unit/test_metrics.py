"""The metric names table: stable names, documented, and spelled the Prometheus way as the
real exporter spells them (what the dashboard and the README rely on)."""

from __future__ import annotations

import re

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from lockgate.common.metrics import (
    CHECKPOINTS,
    METRICS,
    SOURCE_LAG,
    TASK_RECORDS_WRITTEN,
    Instruments,
    MetricKind,
    prometheus_names,
)
from lockgate.common.prometheus import MetricsListenError, parse_metrics_listen

_NAME = re.compile(r"^(lockgate|rpc)(\.[a-z_]+)+$")


def test_names_are_unique_namespaced_and_documented() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for metric in METRICS:
        assert _NAME.match(metric.name), metric.name
        assert metric.unit, metric.name
        assert len(metric.description) > 40, metric.name


def _exported_series(reading: dict[str, float]) -> set[str]:
    """Record one value on every metric through the real Prometheus exporter and return
    the series names it shows."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    instruments = Instruments(provider.get_meter("t"))
    for metric in METRICS:
        attributes = {key: "x" for key in metric.attributes}
        if metric.kind is MetricKind.COUNTER:
            instruments.add(metric, 2, attributes)
        elif metric.kind is MetricKind.HISTOGRAM:
            instruments.record(metric, 0.5, attributes)
        else:
            value = reading.get(metric.name, 1.0)
            instruments.observe(metric, lambda a=attributes, v=value: [(v, a)])  # type: ignore[misc]
    text = generate_latest(registry).decode()
    provider.shutdown()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1].isalpha()}


def test_prometheus_names_are_what_the_exporter_shows() -> None:
    exported = _exported_series({})
    for metric in METRICS:
        for series in prometheus_names(metric):
            assert series in exported, (metric.name, series, sorted(exported))


def test_attribute_names_become_labels() -> None:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    instruments = Instruments(provider.get_meter("t"))
    instruments.add(
        CHECKPOINTS, 1, {"pipeline": "p", "state": "aborted", "abort_reason": "timeout"}
    )
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert re.search(
        r'lockgate_checkpoints_total\{[^}]*abort_reason="timeout"[^}]*\} 1\.0', text
    ), text


def test_a_definition_is_used_only_as_its_kind() -> None:
    instruments = Instruments.disabled()
    with pytest.raises(TypeError, match="counter"):
        instruments.record(TASK_RECORDS_WRITTEN, 1.0, {})
    with pytest.raises(TypeError, match="gauge"):
        instruments.add(SOURCE_LAG, 1, {})


def test_a_gauge_has_one_reading() -> None:
    instruments = Instruments.disabled()
    instruments.observe(SOURCE_LAG, list)
    with pytest.raises(ValueError, match="already"):
        instruments.observe(SOURCE_LAG, list)


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:9470", ("127.0.0.1", 9470)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_metrics_listen_is_parsed(listen: str, expected: tuple[str, int]) -> None:
    assert parse_metrics_listen(listen) == expected


@pytest.mark.parametrize(
    "listen", ["9470", "127.0.0.1:", "127.0.0.1:port", "my host:80", ":80", "1.2.3.4:70000"]
)
def test_a_bad_metrics_listen_names_the_flag(listen: str) -> None:
    with pytest.raises(MetricsListenError, match="--metrics-listen"):
        parse_metrics_listen(listen)
