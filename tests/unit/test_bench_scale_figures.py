"""The scale run's CPU a checkpoint (`bench/coordinator_scale.py`): the cores each process
used over the window, turned into milliseconds of CPU for each checkpoint committed in it,
the figure the full size's leader target (< 1 ms) is read against."""

from __future__ import annotations

import sys
from pathlib import Path

# The bench's modules import each other as top-level names: bench/ is their scripts' own
# directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from coordinator_scale import ScaleResult, ScaleSize, cpu_a_checkpoint


def _result(*, committed: int, database_cores: float | None) -> ScaleResult:
    return ScaleResult(
        db="sqlite" if database_cores is None else "postgres",
        size=ScaleSize(pipelines=300, tasks=10, executors=10, interval_ms=1000, duration_s=40),
        lags_ms=[],
        completions_ms=[],
        reactions_ms=[],
        leader_cores=0.7,
        executor_cores=0.8,
        database_cores=database_cores,
        machine_cores=1.95,
        executor_switches=56_000,
        committed=committed,
        aborted=0,
        window_s=40.0,
        setup_s=60.0,
        creates_ms=[],
        abort_reasons=[],
    )


def test_each_process_cpu_is_shared_out_over_the_checkpoints_committed() -> None:
    # 11,200 checkpoints in 40 s: one every 3.57 ms of the window; 0.7 cores of it is 2.5 ms.
    line = cpu_a_checkpoint(_result(committed=11_200, database_cores=0.35))
    assert "leader 2.50 ms (the full size needs < 1 ms)" in line
    assert "the 10 executors 2.86 ms" in line
    assert "the database server 1.25 ms" in line
    assert "1.95 busy" in line
    assert "switched 0.5 times a task" in line  # 56,000 over 112,000 tasks' checkpoints


def test_sqlite_has_no_server_and_a_window_without_commits_says_so() -> None:
    assert "database server" not in cpu_a_checkpoint(_result(committed=100, database_cores=None))
    assert cpu_a_checkpoint(_result(committed=0, database_cores=None)).startswith(
        "no checkpoint committed"
    )
