"""`lockgate pipeline/cluster ... --json` against a coordinator process: every field is
printed, zero values included, so a script can read partition 0 like any other."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from lockgate.client.coordinator_cli import cluster_app, pipeline_app
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    unique_name,
)


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[str]:
    """One coordinator replica on a fresh SQLite file; its address."""
    running = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        (replica,) = running.start(1)
        running.leader()
        yield replica.address
    finally:
        running.stop_all()


def _cli() -> Callable[..., Any]:
    app = typer.Typer()
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(pipeline_app, name="pipeline")
    runner = CliRunner()

    def run(coordinator: str, *args: str) -> Any:
        result = runner.invoke(app, [*args, "--coordinator", coordinator])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    return run


def test_json_output_keeps_zero_values_and_delete_says_what_it_deleted(
    coordinator: str,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Offsets of partition 0 at offset 0 keep both keys; empty lists and zero counters are
    there; `delete --json` names the deleted pipeline instead of printing `{}`."""
    cli = _cli()
    name, source, sink = unique_name("json"), new_topic(partitions=2), new_topic()
    bootstrap = kafka_broker.bootstrap_servers
    spec_file = tmp_path / "pipeline.yaml"
    spec_file.write_text(
        f"name: {name}\n"
        f"source: {{kafka: {{bootstrap_servers: '{bootstrap}', topics: [{source}]}}}}\n"
        f"sink: {{kafka: {{bootstrap_servers: '{bootstrap}', topic: {sink}}}}}\n"
    )
    created = cli(coordinator, "pipeline", "create", "-f", str(spec_file), "--paused", "--json")
    assert created["name"] == name and created["spec"]["tasks_max"] == 1

    cli(coordinator, "pipeline", "stop", name, "--json")
    offsets = cli(
        coordinator,
        "pipeline",
        "offsets",
        name,
        "--set",
        f"{source}:0=0",
        "--set",
        f"{source}:1=5",
        "--json",
    )
    by_partition = {o["partition"]: o["offset"] for o in offsets["offsets"]}
    assert by_partition == {0: "0", 1: "5"}, offsets
    assert offsets["checkpoint_id"] == "0"

    status = cli(coordinator, "pipeline", "status", name, "--json")
    assert status["in_flight_checkpoint_ids"] == []
    assert status["last_committed_checkpoint_id"] == "0"
    history = cli(coordinator, "pipeline", "checkpoints", name, "--json")
    assert history["checkpoints"] == [] and history["next_page_token"] == ""

    cluster = cli(coordinator, "cluster", "status", "--json")
    assert cluster["executors"] == []
    assert all("is_leader" in member for member in cluster["coordinators"]), cluster

    deleted = cli(coordinator, "pipeline", "delete", name, "--json")
    assert deleted == {"name": name, "deleted": True}
