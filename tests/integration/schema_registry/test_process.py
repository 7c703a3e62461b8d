"""The registry process: restart on the same database, clean stop, clear startup errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.processes import RegistryProcess

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def test_restart_keeps_schemas_and_stops_cleanly(
    registry_factory: Callable[..., RegistryProcess], tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'registry.db'}"
    first = registry_factory(db_url)
    created = httpx.post(f"{first.url}/subjects/r/versions", json={"schema": SCHEMA}, timeout=30)
    assert created.json() == {"id": 1}
    assert first.stop() == 0
    second = registry_factory(db_url)  # migrations already applied: start anyway
    assert httpx.get(f"{second.url}/schemas/ids/1", timeout=30).json()["schema"]
    assert httpx.get(f"{second.url}/subjects", timeout=30).json() == ["r"]
    assert second.stop() == 0


def run_registry(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the registry expecting it to exit at once."""
    return subprocess.run(
        [sys.executable, "-m", "lockgate.schema_registry", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_database_url_is_explained_without_password() -> None:
    result = run_registry("--db", "postgresql+psycopg://lockgate:hunter2@127.0.0.1:1/registry")
    assert result.returncode == 2
    assert "cannot open the database" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_http_port_in_use_is_explained(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        result = run_registry(
            "--db",
            f"sqlite:///{tmp_path / 'r.db'}",
            "--grpc",
            "127.0.0.1:0",
            "--http",
            f"127.0.0.1:{port}",
        )
    assert result.returncode != 0
    assert f"cannot listen on --http 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
