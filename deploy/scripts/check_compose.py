"""make lint: deploy/compose.yaml against the compose-spec JSON schema, as `docker compose
config` would check it, without Docker.

The schema is the one check-jsonschema ships (``vendor/compose-spec.json``), taken from its
pinned wheel into ``.lockgate/deploy-tools`` by ``deploy/scripts/deploy_tools.sh install``.
Beyond the schema: every ``depends_on`` names a service of the file. Prints every problem
and exits 1 if there is one.

Usage: ``python deploy/scripts/check_compose.py SCHEMA COMPOSE_FILE``
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml


def schema_problems(document: Any, schema: Mapping[str, Any]) -> list[str]:
    """What the compose-spec schema refuses in ``document``, as ``path: message``."""
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
        for error in sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    ]


def dependency_problems(document: Mapping[str, Any]) -> list[str]:
    """Each ``depends_on`` entry that names no service of the file."""
    services = document.get("services") or {}
    problems: list[str] = []
    for name, service in services.items():
        depends_on = (service or {}).get("depends_on") or []
        for target in depends_on:
            if target not in services:
                problems.append(f"services/{name}/depends_on: no service named {target!r}")
    return problems


def main(argv: list[str]) -> int:
    """Check ``argv[1]`` (the compose file) against ``argv[0]`` (the schema)."""
    if len(argv) != 2:
        print("usage: check_compose.py SCHEMA COMPOSE_FILE", file=sys.stderr)
        return 2
    schema = json.loads(Path(argv[0]).read_text())
    compose_file = Path(argv[1])
    # safe_load resolves the file's anchors and `<<` merge keys, as Compose does.
    document = yaml.safe_load(compose_file.read_text())
    problems = schema_problems(document, schema)
    if isinstance(document, dict):
        problems += dependency_problems(document)
    for problem in problems:
        print(f"{compose_file}: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
