"""`lockgate auth token create`: a token printed once, only its hash in the file; a role
that does not exist is refused (exit 2) and nothing is written."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lockgate.client.cli import app
from lockgate.common.access import Role
from lockgate.common.auth import Authenticator, Principal


def test_token_create_prints_the_token_once_and_stores_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    argv = ["auth", "token", "create", "--principal", "ops", "--role", "operator"]
    result = CliRunner().invoke(app, [*argv, "--role", "viewer", "--file", str(path)])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert len(token) >= 43
    assert token not in path.read_text()
    assert Authenticator.from_file(path).by_token(token) == Principal(
        "ops", frozenset({Role.OPERATOR, Role.VIEWER})
    )


def test_token_create_refuses_an_unknown_role(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    argv = ["auth", "token", "create", "--principal", "ops", "--role", "root"]
    result = CliRunner().invoke(app, [*argv, "--file", str(path)])
    assert result.exit_code == 2
    assert "'root' is not one of" in result.output
    assert not path.exists()
