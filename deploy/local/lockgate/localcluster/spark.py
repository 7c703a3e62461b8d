"""A Spark standalone cluster from the pyspark package itself: one master and its workers.

pyspark ships Spark's jars and ``bin/spark-class``, so ``spark-class
org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` run a real standalone
cluster without a download (``SPARK_HOME`` is pyspark's package directory). The local
cluster starts one with ``LOCKGATE_SPARK=standalone`` (a master on ``127.0.0.1:7077``, two
workers of one core and 1 GiB each) and points its executors at it; the tests build the same
specs on free ports.

The master and the workers run with an empty ``PYTHONPATH`` in a directory of their own, so
the Python workers they start see only pyspark, the interpreter's installed packages and what
an executor ships them (``dataplane/spark/code_shipping.py``), never a source tree.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lockgate.localcluster.ports import LOOPBACK
from lockgate.localcluster.process import ProcessSpec, answers_ok

SPARK_ENV = "LOCKGATE_SPARK"
SPARK_MASTER_PORT_ENV = "LOCKGATE_SPARK_MASTER_PORT"
SPARK_MASTER_WEBUI_PORT_ENV = "LOCKGATE_SPARK_MASTER_WEBUI_PORT"
#: ``LOCKGATE_SPARK`` values: each executor's own ``local[1]``, or one standalone cluster.
LOCAL, STANDALONE = "local", "standalone"
MASTER_MAIN = "org.apache.spark.deploy.master.Master"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
#: Heap of the master's and each worker's own JVM (Spark's default is 1 GiB each).
DAEMON_MEMORY = "256m"
#: What each executor asks of a standalone cluster: one core on one worker (Spark would
#: otherwise give the first application every core and leave the second none), a heap
#: that fits a worker's 1 GiB, and a driver address on loopback, where the workers are
#: (the host name may resolve to another interface).
EXECUTOR_SPARK_CONF: Mapping[str, str] = {
    "spark.driver.host": LOOPBACK,
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
}


def spark_home() -> Path:
    """pyspark's package directory, which holds Spark's ``bin/`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def alive_workers(webui: str, *, timeout_s: float = 2.0) -> int:
    """How many workers the master at ``webui`` (``HOST:PORT`` of its UI) lists ALIVE; 0 when
    it does not answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{webui}/json/", timeout=timeout_s) as answer:
            state = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError):
        return 0
    return sum(1 for worker in state.get("workers", ()) if worker.get("state") == "ALIVE")


@dataclass(frozen=True)
class StandaloneSpark:
    """One master and ``workers`` workers on ``host``, their work directories in ``home``."""

    home: Path
    master_port: int = 7077
    #: The master's web UI, whose ``/json/`` tells when the workers have joined.
    webui_port: int = 8180
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    host: str = LOOPBACK

    @property
    def master_url(self) -> str:
        """What executors get as ``--spark-master``."""
        return f"spark://{self.host}:{self.master_port}"

    @property
    def webui(self) -> str:
        """``HOST:PORT`` of the master's web UI."""
        return f"{self.host}:{self.webui_port}"

    def _spec(
        self,
        name: str,
        main: str,
        args: list[str],
        *,
        address: str,
        ready: Callable[[], bool],
        ports: tuple[int, ...] = (),
    ) -> ProcessSpec:
        work = self.home / "spark" / name
        home = spark_home()
        env = {
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_LOG_DIR": str(work),
            # The Python workers below see no source tree, only what executors ship.
            "PYTHONPATH": "",
        }
        return ProcessSpec(
            name=name,
            argv=(str(home / "bin" / "spark-class"), main, *args),
            env=env,
            cwd=work,
            prepare=lambda: work.mkdir(parents=True, exist_ok=True),
            address=address,
            ready=ready,
            ports=ports,
            ready_timeout_s=60.0,
            stop_grace_s=15.0,
        )

    def master_spec(self) -> ProcessSpec:
        """The master; ready when its web UI answers."""
        return self._spec(
            "spark-master",
            MASTER_MAIN,
            [
                "--host",
                self.host,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.webui_port),
            ],
            address=f"{self.master_url} (web UI http://{self.webui})",
            ports=(self.master_port, self.webui_port),
            ready=lambda: answers_ok(f"http://{self.webui}/json/"),
        )

    def worker_spec(self, number: int) -> ProcessSpec:
        """Worker ``number`` (from 1), on ports of the kernel's choosing; ready once the
        master lists ``number`` workers alive (the workers start one after the other)."""
        work = self.home / "spark" / f"spark-worker-{number}"
        return self._spec(
            f"spark-worker-{number}",
            WORKER_MAIN,
            [
                *("--host", self.host, "--port", "0", "--webui-port", "0"),
                *("--cores", str(self.worker_cores), "--memory", self.worker_memory),
                *("--work-dir", str(work / "work"), self.master_url),
            ],
            address=f"{self.host} ({self.worker_cores} core, {self.worker_memory})",
            ready=lambda: alive_workers(self.webui) >= number,
        )

    def processes(self) -> list[ProcessSpec]:
        """The master, then the workers, in start order."""
        return [self.master_spec(), *(self.worker_spec(n) for n in range(1, self.workers + 1))]


def standalone_from_env(home: Path) -> StandaloneSpark | None:
    """The cluster ``LOCKGATE_SPARK=standalone`` asks for (None: ``local``, the default);
    SystemExit names a bad value."""
    kind = os.environ.get(SPARK_ENV, "").strip().lower() or LOCAL
    if kind == LOCAL:
        return None
    if kind != STANDALONE:
        raise SystemExit(f"error: ${SPARK_ENV} must be {LOCAL} or {STANDALONE}, got {kind!r}")
    ports: dict[str, int] = {}
    for name, default in ((SPARK_MASTER_PORT_ENV, 7077), (SPARK_MASTER_WEBUI_PORT_ENV, 8180)):
        raw = os.environ.get(name, "").strip() or str(default)
        if not raw.isdigit() or not 1 <= int(raw) <= 65535:
            raise SystemExit(f"error: ${name} must be a TCP port number, got {raw!r}")
        ports[name] = int(raw)
    return StandaloneSpark(
        home=home,
        master_port=ports[SPARK_MASTER_PORT_ENV],
        webui_port=ports[SPARK_MASTER_WEBUI_PORT_ENV],
    )


__all__ = [
    "EXECUTOR_SPARK_CONF",
    "SPARK_ENV",
    "StandaloneSpark",
    "alive_workers",
    "spark_home",
    "standalone_from_env",
]
