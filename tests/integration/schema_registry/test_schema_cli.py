"""``lockgate schema ...`` against a registry process."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from lockgate.client.schema_cli import app
from tests.support.processes import RegistryProcess

V1 = {"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "ms", "type": "long", "default": 0}]}
V3 = {**V1, "fields": [*V1["fields"], {"name": "user", "type": "string"}]}


def test_schema_cli(sqlite_registry: RegistryProcess, tmp_path: Path) -> None:
    runner = CliRunner()
    url = ["--registry", sqlite_registry.url]
    files = {}
    for name, document in (("v1", V1), ("v2", V2), ("v3", V3)):
        files[name] = tmp_path / f"{name}.avsc"
        files[name].write_text(json.dumps(document))

    result = runner.invoke(app, ["register", "clicks-value", str(files["v1"]), *url])
    assert result.exit_code == 0, result.output
    assert "version 1 with id 1" in result.output

    result = runner.invoke(app, ["register", "clicks-value", str(files["v2"]), "--json", *url])
    assert result.exit_code == 0 and json.loads(result.output) == {"id": 2}

    result = runner.invoke(app, ["check", "clicks-value", str(files["v3"]), *url])
    assert result.exit_code == 1
    assert "READER_FIELD_MISSING_DEFAULT_VALUE at /Click/user" in result.output

    result = runner.invoke(app, ["check", "clicks-value", str(files["v2"]), *url])
    assert result.exit_code == 0 and "compatible" in result.output

    result = runner.invoke(app, ["versions", "clicks-value", *url])
    assert result.exit_code == 0 and "url, ms" in result.output

    result = runner.invoke(app, ["subjects", "--json", *url])
    assert json.loads(result.output) == ["clicks-value"]

    result = runner.invoke(app, ["get", "clicks-value", "1", "--json", *url])
    assert json.loads(result.output)["id"] == 1
    result = runner.invoke(app, ["get", "--id", "2", *url])
    assert result.exit_code == 0 and '"ms"' in result.output

    result = runner.invoke(app, ["config", "clicks-value", "--set", "full", *url])
    assert "compatibility is FULL" in result.output
    result = runner.invoke(app, ["config", "--set", "sideways", *url])
    assert result.exit_code == 2 and "error 42203" in result.output

    result = runner.invoke(app, ["delete", "clicks-value", "--version", "1", *url])
    assert result.exit_code == 0 and "soft-deleted clicks-value version(s) 1" in result.output
    result = runner.invoke(app, ["get", "nope", *url])
    assert result.exit_code == 1 and "error 40401" in result.output


def test_schema_cli_with_protobuf(sqlite_registry: RegistryProcess, tmp_path: Path) -> None:
    runner = CliRunner()
    url = ["--registry", sqlite_registry.url]
    v1, v2 = tmp_path / "pay_v1.proto", tmp_path / "pay_v2.proto"
    v1.write_text('syntax = "proto3";\nmessage Pay { string card = 1; }\n')
    v2.write_text('syntax = "proto3";\nmessage Pay { int64 card = 1; }\n')
    # A .proto file is registered as PROTOBUF without --type.
    result = runner.invoke(app, ["register", "pay-value", str(v1), *url])
    assert result.exit_code == 0 and "version 1" in result.output, result.output
    result = runner.invoke(app, ["get", "pay-value", *url])
    assert result.exit_code == 0 and "string card = 1;" in result.output, result.output
    result = runner.invoke(app, ["versions", "pay-value", *url])
    assert result.exit_code == 0 and "Pay" in result.output
    result = runner.invoke(app, ["check", "pay-value", str(v2), *url])
    assert result.exit_code == 1
    assert "FIELD_SCALAR_KIND_CHANGED at #/Pay/card=1" in result.output
    inline = 'syntax = "proto3"; message Pay { string card = 1 }'
    result = runner.invoke(
        app, ["check", "pay-value", "-", "--type", "protobuf", *url], input=inline
    )
    assert result.exit_code == 2 and "error 42201" in result.output, result.output


def test_unreachable_registry_says_so() -> None:
    result = CliRunner().invoke(app, ["subjects", "--registry", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "cannot reach the schema registry" in result.output


def test_invalid_input_exits_2_and_other_failures_1(
    sqlite_registry: RegistryProcess, tmp_path: Path
) -> None:
    """The exit-status convention of every `lockgate` command: 2 for invalid input (a missing
    file, an invalid schema, version or level, as the pipeline CLI exits for a bad file), 1
    for other failures (an unknown subject, an incompatible schema refused with 409)."""
    runner = CliRunner()
    url = ["--registry", sqlite_registry.url]
    not_avro = tmp_path / "not-avro.avsc"
    not_avro.write_text('{"type": "record", "name": "X", "fields": [{"name": "a"}]}')
    invalid = {
        "invalid schema": (["register", "x-value", str(not_avro)], "error 42201"),
        "missing file": (["register", "x-value", str(tmp_path / "none.avsc")], "not found"),
        "invalid level": (["config", "--set", "sideways"], "error 42203"),
        "invalid version": (["get", "x-value", "minus-one"], "error 42202"),
    }
    for what, (args, said) in invalid.items():
        result = runner.invoke(app, [*args, *url])
        shown = " ".join(result.output.split())  # the console wraps long lines
        assert result.exit_code == 2 and said in shown, (what, result.output)

    v1 = tmp_path / "v1.avsc"
    v1.write_text(json.dumps(V1))
    v3 = tmp_path / "v3.avsc"
    v3.write_text(json.dumps(V3))
    assert runner.invoke(app, ["register", "exit-value", str(v1), *url]).exit_code == 0
    conflict = runner.invoke(app, ["register", "exit-value", str(v3), *url])
    assert conflict.exit_code == 1 and "error 409" in conflict.output, conflict.output
    missing = runner.invoke(app, ["versions", "nope-value", *url])
    assert missing.exit_code == 1 and "error 40401" in missing.output, missing.output
