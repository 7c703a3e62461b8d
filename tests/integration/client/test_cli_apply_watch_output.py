"""`lockgate pipeline apply`, `pipeline status --watch` and `-o json|yaml` against a
coordinator process (issue 9's CLI items): apply creates, then updates printing each field
that changed, then sends nothing; every read command's JSON and YAML parse back to the same
document; --watch shows the status once per refresh and stops after --count."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from lockgate.client.cli import app
from lockgate.v1 import coordinator_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    CoordinatorProcess,
    unique_name,
)


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """One coordinator replica on a fresh SQLite file."""
    running = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        (member,) = running.start(1)
        running.leader()
        yield member
    finally:
        running.stop_all()


def _runner(coordinator: str) -> Callable[..., Result]:
    runner = CliRunner()

    def run(*args: str, exit_code: int = 0) -> Result:
        # Wide enough that no table column is cut short.
        result = runner.invoke(app, [*args, "--coordinator", coordinator], env={"COLUMNS": "200"})
        assert result.exit_code == exit_code, result.output
        return result

    return run


def _pipeline_file(
    path: Path, name: str, bootstrap: str, source: str, sink: str, **extra: Any
) -> Path:
    document: dict[str, Any] = {
        "name": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topics": [source]}},
        "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink}},
        **extra,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_apply_creates_then_updates_field_by_field_then_changes_nothing(
    replica: CoordinatorProcess,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """First apply creates (version 1); a changed file updates through UpdatePipeline
    (version 2) and prints each changed field with its old and new value and no other;
    the same file again is reported unchanged and leaves the version at 2."""
    cli = _runner(replica.address)
    name, bootstrap = unique_name("apply"), kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2), new_topic()
    spec_file = tmp_path / "pipeline.yaml"
    _pipeline_file(spec_file, name, bootstrap, source, sink)

    created = cli("pipeline", "apply", "-f", str(spec_file))
    assert f"pipeline {name} created (config version 1)" in created.stdout, created.output

    _pipeline_file(
        spec_file,
        name,
        bootstrap,
        source,
        sink,
        checkpoint={"interval_ms": 500},
        tasks_max=2,
    )
    updated = cli("pipeline", "apply", "-f", str(spec_file))
    lines = updated.stdout.splitlines()
    assert lines[0] == f"pipeline {name} updated (config version 2)", updated.output
    assert sorted(lines[1:]) == [
        "  checkpoint.interval_ms: 1000 -> 500",
        "  tasks_max: 1 -> 2",
    ], updated.output
    stored = replica.stub().GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5)
    assert stored.pipeline.config_version == 2
    assert stored.pipeline.spec.tasks_max == 2
    assert stored.pipeline.spec.checkpoint.interval_ms == 500

    again = cli("pipeline", "apply", "-f", str(spec_file), "-o", "json")
    document = json.loads(again.stdout)
    assert document["action"] == "unchanged" and document["changes"] == []
    assert document["pipeline"]["config_version"] == "2"
    stored = replica.stub().GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5)
    assert stored.pipeline.config_version == 2, "a no-op apply must not bump the version"


#: Measured on each call, not stored: the source lag asks Kafka, which may not answer one
#: call in time on a loaded machine (the status then says `source_lag_complete: false`).
_MEASURED = frozenset({"source_lags", "source_lag_complete", "total_source_lag"})


def _stable(document: Any) -> Any:
    """`document` without its times (a lease expiry, a last-seen time move between calls)
    and what each call measures anew."""
    if isinstance(document, dict):
        return {
            k: _stable(v)
            for k, v in document.items()
            if not k.endswith("_time") and k not in _MEASURED
        }
    if isinstance(document, list):
        return [_stable(v) for v in document]
    return document


def test_read_commands_print_the_same_document_as_json_and_yaml(
    replica: CoordinatorProcess,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Each read command's -o json and -o yaml parse to the same document, --json is -o
    json, and --json with -o yaml is refused with exit 2."""
    cli = _runner(replica.address)
    name, bootstrap = unique_name("out"), kafka_broker.bootstrap_servers
    spec_file = _pipeline_file(tmp_path / "p.yaml", name, bootstrap, new_topic(), new_topic())
    cli("pipeline", "create", "-f", str(spec_file), "--paused")
    reads = [
        ("cluster", "status"),
        ("pipeline", "list"),
        ("pipeline", "get", name),
        ("pipeline", "status", name),
        ("pipeline", "offsets", name),
        ("pipeline", "checkpoints", name),
    ]
    for command in reads:
        as_json = json.loads(cli(*command, "-o", "json").stdout)
        as_yaml = yaml.safe_load(cli(*command, "--output", "yaml").stdout)
        alias = json.loads(cli(*command, "--json").stdout)
        assert _stable(as_json) == _stable(as_yaml), command
        assert _stable(alias) == _stable(as_json), command
    got = json.loads(cli("pipeline", "get", name, "-o", "json").stdout)
    assert got["name"] == name and got["spec"]["tasks_max"] == 1
    refused = cli("pipeline", "get", name, "--json", "-o", "yaml", exit_code=2)
    assert "--json and -o yaml disagree" in refused.output


def test_status_watch_refreshes_count_times_and_stops(
    replica: CoordinatorProcess,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """--watch --count 3 shows the view three times (tasks and the commit age in each)
    and exits 0; with -o json each refresh is one JSON document per line."""
    cli = _runner(replica.address)
    name, bootstrap = unique_name("watch"), kafka_broker.bootstrap_servers
    spec_file = _pipeline_file(tmp_path / "p.yaml", name, bootstrap, new_topic(), new_topic())
    cli("pipeline", "create", "-f", str(spec_file), "--paused")

    watched = cli("pipeline", "status", name, "--watch", "--count", "3", "--interval", "0.05")
    assert watched.stdout.count(f"{name}: target PAUSED") == 3, watched.output
    assert watched.stdout.count("last committed 0 at - (never)") == 3, watched.output
    assert watched.stdout.count(f"{name}/0") == 3, "the task table in every refresh"

    streamed = cli(
        "pipeline", "status", name, "-w", "--count", "2", "--interval", "0.05", "-o", "json"
    )
    documents = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert [d["name"] for d in documents] == [name, name]
    bad = cli("pipeline", "status", name, "--watch", "--count", "0", exit_code=2)
    assert "--count must be > 0" in bad.output


def test_apply_over_a_pipeline_changed_since_it_was_read_changes_nothing(
    replica: CoordinatorProcess,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another client updates the pipeline between apply's read and its UpdatePipeline: the
    coordinator refuses the stale config version (ABORTED, exit 1) and keeps the other
    client's change."""
    cli = _runner(replica.address)
    name, bootstrap = unique_name("race"), kafka_broker.bootstrap_servers
    source, sink = new_topic(), new_topic()
    spec_file = _pipeline_file(tmp_path / "p.yaml", name, bootstrap, source, sink)
    cli("pipeline", "apply", "-f", str(spec_file))
    stub = replica.stub()
    read = stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5).pipeline
    other = coordinator_pb2.UpdatePipelineRequest(name=name, spec=read.spec)
    other.spec.tasks_max = 3
    stub.UpdatePipeline(other, timeout=10)
    # apply reads the pipeline as it was before the other client's update.
    monkeypatch.setattr(
        "lockgate.client.coordinator_cli.existing_pipeline", lambda coordinator, name: read
    )
    _pipeline_file(spec_file, name, bootstrap, source, sink, checkpoint={"interval_ms": 700})
    refused = cli("pipeline", "apply", "-f", str(spec_file), exit_code=1)
    assert "ABORTED" in refused.output, refused.output
    now = stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5).pipeline
    assert now.config_version == 2 and now.spec.tasks_max == 3
    assert now.spec.checkpoint.interval_ms != 700
