"""Every file in ``examples/`` works as the README says, against a real broker and registry.

A new example must be added here: :func:`test_every_example_is_covered` fails on a file no test
below runs. The copy pipeline itself runs end to end in ``tests/integration/e2e``.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

from typer.testing import CliRunner

from lockgate.client.output import message_json
from lockgate.client.pipeline_file import read_spec_file, spec_from_mapping
from lockgate.client.schema_cli import app as schema_app
from lockgate.common.model.proto import spec_violations
from lockgate.localcluster.process import repo_root
from tests.fixtures.kafka import KafkaBroker
from tests.support.processes import RegistryProcess

EXAMPLES = repo_root() / "examples"
ROUND_TRIP = EXAMPLES / "schema_registry" / "confluent_round_trip.py"
PIPELINE = EXAMPLES / "copy.yaml"
SCHEMAS = [EXAMPLES / "schema_registry" / f"{n}.avsc" for n in ("user_v1", "user_v2")]
INCOMPATIBLE = EXAMPLES / "schema_registry" / "user_v3_incompatible.avsc"
COVERED = {ROUND_TRIP, PIPELINE, *SCHEMAS, INCOMPATIBLE}


def test_every_example_is_covered() -> None:
    """No example is left out of this module's tests."""
    present = {p for p in EXAMPLES.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert present - COVERED == set(), "add a test for the new example(s)"


def _round_trip(
    *, bootstrap: str, registry: str, timeout_s: int
) -> subprocess.CompletedProcess[str]:
    """Run the example with a fresh topic; its steps are bounded by `timeout_s` each."""
    return subprocess.run(
        [
            sys.executable,
            str(ROUND_TRIP),
            *("--bootstrap", bootstrap, "--registry", registry),
            *("--topic", f"users-{uuid.uuid4().hex[:8]}", "--timeout", str(timeout_s)),
        ],
        capture_output=True,
        text=True,
        timeout=5 * timeout_s + 30,  # five steps, and the start of the interpreter
        check=False,
    )


def test_confluent_round_trip_runs_to_completion(
    kafka_broker: KafkaBroker, module_registry: RegistryProcess
) -> None:
    """The script creates its topic, produces with v1 and v2, reads all four back with the v2
    reader and exits 0 (it used to wait forever for a topic nobody created)."""
    done = _round_trip(
        bootstrap=kafka_broker.bootstrap_servers, registry=module_registry.url, timeout_s=30
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = done.stdout.splitlines()
    assert len(records) == 4, done.stdout
    assert sum("'email': 'unknown'" in r for r in records) == 3, done.stdout
    assert "'email': 'n@x'" in records[-1], done.stdout


def test_confluent_round_trip_fails_with_a_message_when_the_broker_is_unreachable(
    module_registry: RegistryProcess,
) -> None:
    """An unreachable broker ends the script within its timeout, exit 1, saying why."""
    done = _round_trip(bootstrap="127.0.0.1:9", registry=module_registry.url, timeout_s=2)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error: cannot create topic" in done.stderr and "127.0.0.1:9" in done.stderr


def test_the_example_schemas_evolve_as_the_readme_shows(
    module_registry: RegistryProcess,
) -> None:
    """`lockgate schema register` takes v1, `check` says v2 is compatible (exit 0) and v3,
    which adds a field without a default, is not (exit 1)."""
    runner = CliRunner()
    subject = f"users-{uuid.uuid4().hex[:8]}-value"
    url = ["--registry", module_registry.url]
    registered = runner.invoke(schema_app, ["register", subject, str(SCHEMAS[0]), *url])
    assert registered.exit_code == 0, registered.output
    compatible = runner.invoke(schema_app, ["check", subject, str(SCHEMAS[1]), *url])
    assert compatible.exit_code == 0, compatible.output
    incompatible = runner.invoke(schema_app, ["check", subject, str(INCOMPATIBLE), *url])
    assert incompatible.exit_code == 1, incompatible.output
    assert "age" in incompatible.output


def test_the_copy_pipeline_file_passes_the_cli_check_and_round_trips() -> None:
    """`examples/copy.yaml` passes the check `lockgate pipeline create -f` runs before any
    call, and its spec printed as JSON reads back as the same spec."""
    spec = read_spec_file(PIPELINE)
    assert spec_violations(spec) == []
    assert spec.name == "copy" and list(spec.source.kafka.topics) == ["input"]
    assert spec_from_mapping(message_json(spec)) == spec
