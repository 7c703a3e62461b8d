"""`lockgate pipeline validate -f`: the coordinator's parser, offline; every violation
listed with its field, exit 2; -o json lists them as data; a valid file says so, exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from lockgate.client.cli import app

VALID = (
    "name: orders\n"
    "source: {kafka: {bootstrap_servers: '127.0.0.1:9092', topics: [orders]}}\n"
    "sink: {kafka: {bootstrap_servers: '127.0.0.1:9092', topic: out}}\n"
)
#: Four fields wrong in four ways.
INVALID = (
    VALID.replace("topics: [orders]", "topics: ['bad topic']")
    + "checkpoint: {interval_ms: 0, timeout_ms: -5}\n"
    + "errors: {tolerance: all, dead_letter_topic: out}\n"
)
FIELDS = (
    "source.kafka.topics[0]",
    "checkpoint.interval_ms",
    "checkpoint.timeout_ms",
    "errors.dead_letter_topic",
)


def validate(tmp_path: Path, text: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["pipeline", "validate", "-f", str(path), *args])
    return result.exit_code, result.stdout, " ".join(result.stderr.split())


def test_every_violation_is_listed_with_its_field_and_exit_2(tmp_path: Path) -> None:
    code, _, errors = validate(tmp_path, INVALID)
    assert code == 2, errors
    assert errors.startswith("error: INVALID_ARGUMENT"), errors
    for field in FIELDS:
        assert f" {field}: " in errors, (field, errors)
    assert "Traceback" not in errors


def test_json_and_yaml_list_the_violations_as_data(tmp_path: Path) -> None:
    code, out, _ = validate(tmp_path, INVALID, "-o", "json")
    assert code == 2
    document = json.loads(out)
    assert document["valid"] is False
    assert {v["field"] for v in document["violations"]} == set(FIELDS)
    code, out, _ = validate(tmp_path, INVALID, "-o", "yaml")
    assert code == 2 and yaml.safe_load(out) == document | {"file": document["file"]}


def test_a_valid_file_is_valid(tmp_path: Path) -> None:
    code, out, _ = validate(tmp_path, VALID)
    # Without the whitespace: rich folds a line longer than the terminal, and how long the
    # temporary path is depends on the runner (pytest-xdist's are longer).
    assert code == 0 and "".join(out.split()).endswith("pipeline.yaml:valid"), out
    code, out, _ = validate(tmp_path, VALID, "--json")
    assert code == 0 and json.loads(out)["violations"] == []


def test_an_unreadable_file_names_each_unknown_key(tmp_path: Path) -> None:
    code, _, errors = validate(tmp_path, VALID + "tasks: 3\ncheckpoints: {}\n")
    assert code == 2
    assert "tasks: unknown field" in errors and "checkpoints: unknown field" in errors, errors
