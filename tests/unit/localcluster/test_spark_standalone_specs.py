"""``LOCKGATE_SPARK=standalone``: the local cluster's Spark master, workers and executors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.localcluster.cluster import ClusterSettings, cluster_processes


def test_standalone_puts_a_master_and_two_workers_before_the_executors_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKGATE_SPARK", "standalone")
    processes = {spec.name: spec for spec in cluster_processes(ClusterSettings(home=tmp_path))}
    names = list(processes)
    assert names.index("spark-worker-2") < names.index("coordinator-c1")
    master = processes["spark-master"]
    assert master.argv[1:] == (
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", "7077", "--webui-port", "8180"),
    )
    assert Path(master.argv[0]).name == "spark-class"
    worker = processes["spark-worker-1"].argv
    assert worker[worker.index("--cores") + 1] == "1"
    assert worker[worker.index("--memory") + 1] == "1g"
    assert worker[-1] == "spark://127.0.0.1:7077"
    # The workers' Python must not find a source tree through the environment.
    assert processes["spark-worker-1"].env["PYTHONPATH"] == ""
    executor = " ".join(processes["executor-e1"].argv)
    assert "--spark-master spark://127.0.0.1:7077" in executor
    assert "--spark-conf spark.cores.max=1" in executor


def test_local_is_the_default_and_a_typo_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCKGATE_SPARK", raising=False)
    names = [spec.name for spec in cluster_processes(ClusterSettings(home=tmp_path))]
    assert not any(name.startswith("spark-") for name in names)
    monkeypatch.setenv("LOCKGATE_SPARK", "standlone")
    with pytest.raises(SystemExit, match="LOCKGATE_SPARK must be local or standalone"):
        cluster_processes(ClusterSettings(home=tmp_path))
