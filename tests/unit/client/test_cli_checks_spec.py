"""`lockgate pipeline create -f` checks the file with the coordinator's own parser first."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockgate.client import coordinator_cli
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


def create(tmp_path: Path, text: str) -> tuple[int, str]:
    """Run `pipeline create -f` on `text` against no coordinator: exit code and output,
    whitespace collapsed (the console wraps long lines)."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    result = CliRunner().invoke(
        app, ["pipeline", "create", "-f", str(path), "--coordinator", "127.0.0.1:1"]
    )
    return result.exit_code, " ".join(result.output.split())


def test_a_number_written_as_zero_is_refused_not_read_as_the_default(tmp_path: Path) -> None:
    code, output = create(
        tmp_path, VALID + "checkpoint: {interval_ms: 0, timeout_ms: 0}\ntasks_max: 0\n"
    )
    assert code == 2, output
    for field in ("checkpoint.interval_ms", "checkpoint.timeout_ms", "tasks_max"):
        assert f"{field}: must be >= 1, got 0" in output
    assert "cannot reach" not in output


def test_a_number_left_out_still_takes_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Valid: the CLI goes on to call the coordinator, which is not there; the channel tries
    # again until the call's deadline, so a short one (not the CLI's 15 s) keeps this fast.
    monkeypatch.setattr(coordinator_cli, "TIMEOUT_S", 1.0)
    code, output = create(tmp_path, VALID + "checkpoint: {timeout_ms: 5000}\n")
    assert code == 1 and "cannot reach a coordinator" in output, output


def test_each_violation_is_printed_once(tmp_path: Path) -> None:
    code, output = create(
        tmp_path,
        VALID + "checkpoint: {interval_ms: -1}\nerrors: {tolerance: all, dead_letter_topic: out}\n",
    )
    assert code == 2, output
    assert output.count("checkpoint.interval_ms: must be >= 1, got -1") == 1
    assert output.count("errors.dead_letter_topic: is the sink topic 'out'") == 1
    assert output.startswith("error: INVALID_ARGUMENT: invalid pipeline config checkpoint")


def test_every_unknown_key_and_enum_value_of_a_file_is_listed_at_once(tmp_path: Path) -> None:
    code, output = create(
        tmp_path, VALID + "tasks_mx: 2\ndelivery: twice\ncheckpoint: {interval: 5}\n"
    )
    assert code == 2, output
    assert "tasks_mx: unknown field" in output
    assert "delivery: 'twice' is not one of" in output
    assert "checkpoint.interval: unknown field" in output
