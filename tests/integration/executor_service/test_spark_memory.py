"""The executor's Spark driver JVM is started with the heap and options the executor
chose: its defaults (README, issue 13) and its `--spark-driver-memory` flag."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.executor_service.scripted import ExecutorProcess
from tests.support.processes import children

pytestmark = pytest.mark.spark


def _jvm_arguments(executor: ExecutorProcess) -> list[str]:
    """The command line of the executor's Spark driver JVM (its one ``java`` child)."""
    for pid in children(executor.pid):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        if Path(argv[0]).name == "java":
            return argv
    raise AssertionError(f"executor {executor.pid} has no java child")


def test_the_driver_jvm_gets_the_flags_heap_and_the_serial_collector(
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    executor = launch_executor(
        "e1",
        data_plane="spark",
        registered_timeout_s=240,
        extra_args=["--spark-driver-memory", "640m"],
    )
    arguments = _jvm_arguments(executor)
    assert "-Xmx640m" in arguments
    assert "-XX:+UseSerialGC" in arguments
    assert not any(a.startswith("-Xmx") and a != "-Xmx640m" for a in arguments)
