"""deploy/grafana/lockgate.json is a Grafana dashboard over metrics the code defines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lockgate.common.metrics import METRICS, prometheus_names

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lockgate.json"
_SERIES = re.compile(r"\b((?:lockgate|rpc)_[a-z0-9_]+)\b")
# Label matchers and grouping clauses name labels (rpc_method), not series.
_LABELS = re.compile(r"\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)")


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["query"]["query"])
    return queries


def test_every_queried_metric_is_defined() -> None:
    defined = {series for m in METRICS for series in prometheus_names(m)}
    queried = {
        name for q in _queries(_dashboard()) for name in _SERIES.findall(_LABELS.sub(" ", q))
    }
    assert queried, "the dashboard queries no Lockgate metric"
    assert queried <= defined, sorted(queried - defined)


def test_it_shows_what_the_issue_asks_for() -> None:
    queried = " ".join(_queries(_dashboard()))
    for series in (
        "lockgate_task_records_written_total",  # throughput
        "lockgate_source_lag",  # lag
        "lockgate_checkpoint_duration_seconds_bucket",  # checkpoint durations
        "lockgate_checkpoints_total",  # aborts by reason
        "lockgate_leader_failovers_total",  # failovers
    ):
        assert series in queried, series
    assert 'state="aborted"' in queried and "abort_reason" in queried


def test_it_is_a_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat"}
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["type"] == "prometheus"
