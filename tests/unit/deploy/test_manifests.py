"""deploy/: the Dockerfile's own rules (check_dockerfile.py) and compose.yaml's services, whose
command lines the services' own parsers must accept (a renamed flag fails here, not in a
container). make lint checks the rest: hadolint, the compose-spec schema, helm and kubeconform."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from lockgate.coordinator.__main__ import build_parser as coordinator_parser
from lockgate.executor.__main__ import _parser as executor_parser
from lockgate.schema_registry.server import parse_args as registry_args

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DEPLOY / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check_dockerfile = _script("check_dockerfile")
check_compose = _script("check_compose")


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def test_the_dockerfile_keeps_its_rules() -> None:
    assert check_dockerfile.problems((DEPLOY / "docker" / "Dockerfile").read_text()) == []


@pytest.mark.parametrize(
    ("dockerfile", "problem"),
    [
        ("FROM python:3.11-slim\nRUN true\n", "line 1: the final stage never switches"),
        ("FROM python:3.11-slim\nUSER root\n", "line 2: USER root"),
        ("FROM python:3.11-slim\nUSER app\n", "line 2: USER app: use a non-root numeric uid"),
        (
            "FROM python:3.11-slim\nADD --chown=1:1 https://example.org/x.tgz \\\n  /x\nUSER 1\n",
            "line 2: ADD of a URL",
        ),
        (
            "FROM python:3.11-slim AS b\nFROM python:3.11-slim\nCOPY --from=b /a /a\nUSER 1\n",
            "line 3: COPY into the final stage without --chown",
        ),
    ],
)
def test_check_dockerfile_names_each_breach(dockerfile: str, problem: str) -> None:
    found = check_dockerfile.problems(dockerfile)
    assert any(p.startswith(problem) for p in found), found


def test_an_earlier_stage_may_copy_without_chown() -> None:
    dockerfile = "FROM a:1 AS b\nCOPY x /x\nFROM c:2\nCOPY --chown=0:0 --from=b /x /x\nUSER 10\n"
    assert check_dockerfile.problems(dockerfile) == []


def test_compose_has_the_cluster_of_issue_10() -> None:
    services = _compose()["services"]
    images = {name: str(service.get("image", "")) for name, service in services.items()}
    assert images["kafka"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert images["postgres"].startswith("postgres:")
    commands = {name: service.get("command") or [] for name, service in services.items()}
    by_program: dict[str, list[str]] = {}
    for name, command in commands.items():
        if command:
            by_program.setdefault(command[0], []).append(name)
    assert len(by_program["lockgate-coordinator"]) == 3
    assert len(by_program["lockgate-executor"]) == 2
    assert len(by_program["lockgate-schema-registry"]) == 1
    spark = sorted(commands[name][1] for name in by_program["spark-class"])
    assert spark == [
        "org.apache.spark.deploy.master.Master",
        "org.apache.spark.deploy.worker.Worker",
    ]
    for executor in by_program["lockgate-executor"]:
        assert "--spark-master=spark://spark-master:7077" in commands[executor]
    assert check_compose.dependency_problems(_compose()) == []


def test_compose_command_lines_parse_with_the_services_own_parsers() -> None:
    services = _compose()["services"]
    parsers = {
        "lockgate-coordinator": lambda argv: coordinator_parser().parse_args(argv),
        "lockgate-executor": lambda argv: executor_parser().parse_args(argv),
        "lockgate-schema-registry": registry_args,
    }
    parsed = 0
    for service in services.values():
        command = service.get("command") or []
        if command and command[0] in parsers:
            parsers[command[0]](command[1:])  # argparse exits 2 on an unknown flag
            parsed += 1
    assert parsed == 6


def test_check_compose_names_a_missing_dependency() -> None:
    compose = {"services": {"a": {"image": "x:1", "depends_on": ["b"]}}}
    assert check_compose.dependency_problems(compose) == [
        "services/a/depends_on: no service named 'b'"
    ]
