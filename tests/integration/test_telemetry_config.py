"""A bad ``OTEL_*`` value stops a service at start, naming the variable, before it touches any
state: the database file is neither created nor migrated."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.localcluster.commands import (
    coordinator_command,
    executor_command,
    registry_command,
)
from lockgate.localcluster.ports import free_port
from tests.support.processes import start_child

BAD_OTEL = {"OTEL_TRACES_EXPORTER": "jaeger", "OTEL_SDK_DISABLED": "false"}


def _run_to_exit(name: str, argv: list[str], tmp_path: Path) -> tuple[int, str]:
    child = start_child(name, argv, log_path=tmp_path / f"{name}.log", env=BAD_OTEL)
    try:
        code = child.wait_exit(timeout_s=60)
    finally:
        child.stop()
    return code, child.log_text()


@pytest.mark.parametrize("service", ["coordinator", "schema-registry"])
def test_a_bad_otel_value_is_refused_before_the_database_is_touched(
    service: str, tmp_path: Path
) -> None:
    """Exit 2 with OTEL_TRACES_EXPORTER and the accepted values in the message, no traceback,
    and no database file (it used to be created and migrated first)."""
    database = tmp_path / "state" / "service.db"
    database.parent.mkdir()
    address = f"127.0.0.1:{free_port()}"
    argv = (
        coordinator_command(coordinator_id="c1", db_url=f"sqlite:///{database}", listen=address)
        if service == "coordinator"
        else registry_command(
            db_url=f"sqlite:///{database}", grpc_listen=address, http_listen="127.0.0.1:0"
        )
    )
    code, log = _run_to_exit(service, argv, tmp_path)
    assert code == 2, log
    assert "OTEL_TRACES_EXPORTER='jaeger'" in log and "none, console, otlp" in log, log
    assert "Traceback" not in log, log
    assert list(database.parent.iterdir()) == [], log


def test_the_executor_refuses_a_bad_otel_value_without_a_traceback(tmp_path: Path) -> None:
    """The executor exits 2 naming the variable before it starts Spark or calls anyone."""
    argv = executor_command(
        executor_id="e1",
        listen=f"127.0.0.1:{free_port()}",
        coordinators=[f"127.0.0.1:{free_port()}"],
        data_plane="none",
    )
    code, log = _run_to_exit("executor", argv, tmp_path)
    assert code == 2, log
    assert "OTEL_TRACES_EXPORTER='jaeger'" in log and "Traceback" not in log, log
