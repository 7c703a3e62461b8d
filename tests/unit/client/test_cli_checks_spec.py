"""`lockgate pipeline create -f` checks the file with the coordinator's own parser first."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lockgate.client.cli import app

VALID = (
    "name: orders\n"
    "source: {kafka: {bootstrap_servers: '127.0.0.1:9092', topics: [orders]}}\n"
    "sink: {kafka: {bootstrap_servers: '127.0.0.1:9092', topic: out}}\n"
)


def test_an_invalid_file_is_refused_before_any_call_with_every_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        VALID.replace("topics: [orders]", "topics: [orders], format: {key_format: avro}")
        + "checkpoint: {interval_ms: -1}\n"
        + "errors: {tolerance: all, dead_letter_topic: out}\n"
    )
    # No coordinator listens on port 1: a call would fail with "cannot reach", not this.
    result = CliRunner().invoke(
        app, ["pipeline", "create", "-f", str(bad), "--coordinator", "127.0.0.1:1"]
    )
    assert result.exit_code == 2, result.output
    assert "INVALID_ARGUMENT" in result.output
    for field in ("source.kafka.key_format", "checkpoint.interval_ms", "errors.dead_letter_topic"):
        assert field in result.output
    assert "cannot reach" not in result.output
