"""The local cluster's Prometheus scrape configuration: every service's metrics endpoint on
its documented port, one job per kind, a process label per target, the server itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lockgate.localcluster.cluster import REGISTRY_METRICS_PORT, ClusterSettings
from lockgate.localcluster.prometheus import (
    ScrapeTarget,
    local_targets,
    prometheus_spec,
    scrape_config,
)
from lockgate.localcluster.services import COORDINATOR_METRICS_PORTS, EXECUTOR_METRICS_PORTS


def _jobs(text: str) -> dict[str, dict[str, str]]:
    """job -> {process label: target address}."""
    document = yaml.safe_load(text)
    jobs: dict[str, dict[str, str]] = {}
    for job in document["scrape_configs"]:
        assert job["metrics_path"] == "/metrics"
        for static in job["static_configs"]:
            (address,) = static["targets"]
            jobs.setdefault(job["job_name"], {})[static["labels"]["process"]] = address
    return jobs


def test_the_default_cluster_is_scraped_on_its_documented_ports() -> None:
    targets = local_targets(
        coordinator_ports=COORDINATOR_METRICS_PORTS,
        executor_ports=EXECUTOR_METRICS_PORTS,
        registry_ports=ClusterSettings(
            home=Path("h"), registry_metrics_port=REGISTRY_METRICS_PORT, registry_processes=1
        ).registry_metrics_ports,
    )
    text = scrape_config(targets, self_address="127.0.0.1:9090")
    assert _jobs(text) == {
        "prometheus": {"prometheus": "127.0.0.1:9090"},
        "lockgate-coordinator": {
            "coordinator-c1": "127.0.0.1:9470",
            "coordinator-c2": "127.0.0.1:9471",
            "coordinator-c3": "127.0.0.1:9472",
        },
        "lockgate-executor": {"executor-e1": "127.0.0.1:9480", "executor-e2": "127.0.0.1:9481"},
        "lockgate-schema-registry": {"schema-registry": "127.0.0.1:9490"},
    }
    assert yaml.safe_load(text)["global"]["scrape_interval"] == "5s"


def test_every_registry_worker_is_scraped() -> None:
    ports = ClusterSettings(
        home=Path("h"), registry_metrics_port=9490, registry_processes=3
    ).registry_metrics_ports
    assert ports == (9490, 9491, 9492)
    document = yaml.safe_load(
        scrape_config(
            local_targets(coordinator_ports=[1], executor_ports=[], registry_ports=ports),
            self_address="127.0.0.1:1",
        )
    )
    (registry,) = [j for j in document["scrape_configs"] if j["job_name"].endswith("registry")]
    assert [s["targets"][0] for s in registry["static_configs"]] == [
        "127.0.0.1:9490",
        "127.0.0.1:9491",
        "127.0.0.1:9492",
    ]


def test_the_spec_writes_the_config_before_start_and_listens_where_it_says(tmp_path: Path) -> None:
    binary = tmp_path / "prometheus-bin"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    target = ScrapeTarget("lockgate-executor", "executor-e1", "127.0.0.1:9480")
    spec = prometheus_spec(home=tmp_path, port=19090, targets=[target], binary=binary)
    assert spec.prepare is not None
    spec.prepare()
    config = tmp_path / "prometheus" / "prometheus.yml"
    assert _jobs(config.read_text())["lockgate-executor"] == {"executor-e1": "127.0.0.1:9480"}
    assert f"--config.file={config}" in spec.argv
    assert "--web.listen-address=127.0.0.1:19090" in spec.argv
    assert spec.ports == (19090,)


def test_a_missing_binary_names_make_prometheus(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="make prometheus"):
        prometheus_spec(home=tmp_path, port=9090, targets=[], binary=tmp_path / "absent")
