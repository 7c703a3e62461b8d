"""A whole Lockgate cluster of real processes for end-to-end tests.

Coordinator replicas and executors are started from the same
:mod:`lockgate.localcluster.services` specs ``make cluster-up`` uses, on free ports
(:mod:`lockgate.localcluster.ports`), with their state, logs and pid files under a test
directory. Processes are killed with SIGKILL
by pid (read from their own pid files) and restarted under the same id. The ``lockgate``
CLI is run as a subprocess, as a user would.

For partition tests a process can run inside a network namespace
(:mod:`tests.support.netns`): it then listens on the namespace's address, and the others
listen on (and advertise) ``ServiceCluster.host``, the root side's address of the veth
pair, which both sides reach.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient

from lockgate.localcluster.certs import LocalPki
from lockgate.localcluster.kafka import ConsumedRecord, create_topic, read_visible
from lockgate.localcluster.ports import LOOPBACK, free_port
from lockgate.localcluster.process import (
    PortInUseError,
    ProcessSpec,
    ProcessStartError,
    RunningProcess,
    is_alive,
    kill_process,
    read_pid_file,
    start_process,
    stop_process,
    tail,
)
from lockgate.localcluster.services import LOCAL_SPARK_CONF, coordinator_spec, executor_spec
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.support.netns import NetworkNamespace
from tests.support.processes import failpoint_env
from tests.support.waits import wait_for

#: What a process logs when a COMPLETE checkpoint's transaction was aborted under it.
DATA_LOSS_SIGNS = ("cannot be committed", "TRANSACTION_LOST", "DATA_LOSS")

#: Coordinator flags for fault tests: short sessions, so a dead or paused executor's tasks
#: move within seconds.
SHORT_SESSION_ARGS = (
    "--session-timeout-ms",
    "4000",
    "--reassign-delay-ms",
    "0",
    "--heartbeat-interval-ms",
    "500",
)


@dataclass
class ServiceCluster:
    """Coordinators and executors of one test, as separate processes."""

    home: Path
    bootstrap_servers: str
    lease_ms: int = 2000
    coordinator_args: Sequence[str] = ()
    #: The address processes outside a network namespace listen on and advertise.
    host: str = LOOPBACK
    #: The replicas' state database (None: a SQLite file in ``home``).
    database_url: str | None = None
    coordinator_ports: dict[str, int] = field(default_factory=dict)
    #: Process name -> the host it listens on, where not ``host`` (a namespaced one).
    hosts: dict[str, str] = field(default_factory=dict)
    executor_ports: dict[str, int] = field(default_factory=dict)
    #: Serve each process's Prometheus metrics (``--metrics-listen``) on a free port.
    with_metrics: bool = False
    #: Process name -> its metrics port (``with_metrics`` only).
    metrics_ports: dict[str, int] = field(default_factory=dict)
    running: dict[str, RunningProcess] = field(default_factory=dict)
    #: Every name ever started here, so teardown stops them all.
    names: set[str] = field(default_factory=set)
    #: TLS and authentication on every process (``make certs`` material); None: plaintext.
    pki: LocalPki | None = None

    # ------------------------------------------------------------------ processes

    @property
    def db_url(self) -> str:
        """The replicas' shared database: ``database_url``, else a SQLite file in the home."""
        return self.database_url or f"sqlite:///{self.home / 'coordinator.db'}"

    @property
    def coordinator_addresses(self) -> list[str]:
        """Every replica's address, in id order."""
        return [
            self.address(f"coordinator-{key}", port)
            for key, port in sorted(self.coordinator_ports.items())
        ]

    def address(self, name: str, port: int) -> str:
        """``HOST:PORT`` of process ``name`` serving on ``port``."""
        return f"{self.hosts.get(name, self.host)}:{port}"

    def executor_address(self, executor_id: str) -> str:
        """Where executor ``executor_id`` serves ExecutorService."""
        return self.address(f"executor-{executor_id}", self.executor_ports[executor_id])

    def metrics_address(self, name: str) -> str:
        """``127.0.0.1:PORT`` of process ``name``'s ``/metrics`` (``with_metrics`` only)."""
        return f"127.0.0.1:{self.metrics_ports[name]}"

    def _start(
        self,
        make_spec: Callable[[int, int | None], ProcessSpec],
        ports: dict[str, int],
        key: str,
        name: str,
        namespace: NetworkNamespace | None = None,
    ) -> RunningProcess:
        last: Exception | None = None
        for _ in range(3):
            # A namespace's ports are all free but those of its own processes, which took
            # theirs from this probe too.
            port = ports.get(key) or free_port(self.host if namespace is None else LOOPBACK)
            metrics = (self.metrics_ports.get(name) or free_port()) if self.with_metrics else None
            spec = make_spec(port, metrics)
            if namespace is not None:
                spec = dataclasses.replace(spec, argv=namespace.wrap(spec.argv))
            try:
                process = start_process(spec, home=self.home)
            except PortInUseError as exc:
                # Someone took a port between free_port() and the bind: pick others.
                ports.pop(key, None)
                self.metrics_ports.pop(name, None)
                last = exc
                continue
            ports[key] = port
            if metrics is not None:
                self.metrics_ports[name] = metrics
            self.running[spec.name] = process
            self.names.add(spec.name)
            return process
        raise RuntimeError(f"could not start {key}: {last}")

    def start_coordinator(
        self,
        coordinator_id: str,
        *,
        failpoints: str = "",
        hold_dir: Path | None = None,
        namespace: NetworkNamespace | None = None,
    ) -> RunningProcess:
        """Start (or restart) replica ``coordinator_id`` and wait until it serves
        (``hold_dir``: where its ``:hold`` failpoints wait, see ``held``/``release``;
        ``namespace``: run it there, on the namespace's address)."""
        name = f"coordinator-{coordinator_id}"
        self._place(name, namespace)
        return self._start(
            lambda port, metrics: coordinator_spec(
                coordinator_id=coordinator_id,
                host=self.hosts.get(name, self.host),
                port=port,
                db_url=self.db_url,
                lease_ms=self.lease_ms,
                extra_args=[*self.coordinator_args, *self._open_port_args(name)],
                env=failpoint_env(failpoints, hold_dir=hold_dir),
                metrics_port=metrics,
                pki=self.pki,
            ),
            self.coordinator_ports,
            coordinator_id,
            name,
            namespace,
        )

    def _open_port_args(self, name: str) -> list[str]:
        """``--insecure`` for a plaintext process listening beyond loopback (a veth address):
        the services refuse that unless told, and these tests choose it."""
        host = self.hosts.get(name, self.host)
        return ["--insecure"] if self.pki is None and host != LOOPBACK else []

    def _place(self, name: str, namespace: NetworkNamespace | None) -> None:
        """Note where process ``name`` listens: in ``namespace`` or on ``host``."""
        if namespace is None:
            self.hosts.pop(name, None)
        else:
            self.hosts[name] = namespace.address

    def start_executor(
        self,
        executor_id: str,
        *,
        failpoints: str = "",
        hold_dir: Path | None = None,
        spark_master: str = "local[1]",
        spark_conf: Mapping[str, str] | None = None,
        data_plane: str | None = None,
        namespace: NetworkNamespace | None = None,
        ready_timeout_s: float = 240.0,
    ) -> RunningProcess:
        """Start (or restart) executor ``executor_id`` and wait until it registered
        (``data_plane="none"``: the control path only, no SparkSession; ``spark_conf``: its
        ``--spark-conf`` settings besides the local cluster's; ``hold_dir``: where its
        ``:hold`` failpoints wait, see ``held``/``release``; ``namespace``: run it there, on
        the namespace's address)."""
        name = f"executor-{executor_id}"
        self._place(name, namespace)
        env = failpoint_env(failpoints, hold_dir=hold_dir)
        if namespace is not None:
            # Spark's driver binds the address the host name resolves to, which may not
            # exist in the namespace; its own traffic stays on the namespace's loopback.
            env["SPARK_LOCAL_IP"] = LOOPBACK
        return self._start(
            lambda port, metrics: executor_spec(
                executor_id=executor_id,
                host=self.hosts.get(name, self.host),
                port=port,
                coordinators=self.coordinator_addresses,
                spark_master=spark_master,
                spark_conf={**LOCAL_SPARK_CONF, **(spark_conf or {})},
                env=env,
                data_plane=data_plane,
                ready_timeout_s=ready_timeout_s,
                metrics_port=metrics,
                pki=self.pki,
                extra_args=self._open_port_args(name),
            ),
            self.executor_ports,
            executor_id,
            name,
            namespace,
        )

    def pid(self, name: str) -> int | None:
        """Pid of process ``name`` if it runs."""
        record = read_pid_file(self.home, name)
        if record is None:
            return None
        return record.pid if is_alive(record) else None

    def is_running(self, name: str) -> bool:
        """True if process ``name`` is alive."""
        return self.pid(name) is not None

    def kill(self, name: str) -> int:
        """SIGKILL process ``name`` (by its pid file) and wait until it is gone."""
        pid = kill_process(home=self.home, name=name)
        assert pid is not None, f"{name} does not run"
        self.running.pop(name, None)
        return pid

    def signal(self, name: str, signum: signal.Signals) -> None:
        """Send ``signum`` (SIGSTOP, SIGCONT) to process ``name``, by its pid file."""
        record = read_pid_file(self.home, name)
        assert record is not None and is_alive(record), f"{name} does not run"
        os.kill(record.pid, signum)

    def stop_all(self) -> None:
        """Stop every process this cluster started (executors first)."""
        for name in sorted(self.names, key=lambda n: (not n.startswith("executor"), n)):
            stop_process(home=self.home, name=name, grace_s=10)

    def log(self, name: str) -> str:
        """The whole log of process ``name``."""
        path = self.home / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def data_loss_line(self) -> str | None:
        """The first log line, of any process, reporting a lost COMPLETE transaction."""
        for name in sorted(self.names):
            for line in self.log(name).splitlines():
                if any(sign in line for sign in DATA_LOSS_SIGNS):
                    return f"{name}: {line}"
        return None

    def wait_held(self, hold_dir: Path, failpoint: str, what: str, *, timeout_s: float) -> str:
        """Wait until a process holds at ``failpoint`` (see ``held``); returns its detail."""
        detail: str = wait_for(
            what, lambda: held(hold_dir, failpoint), timeout_s=timeout_s, explain=self.logs_tail
        )
        return detail

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines of every log, for assertion messages."""
        return "\n".join(
            f"== {name}\n{tail(self.home / 'log' / f'{name}.log', lines=lines)}"
            for name in sorted(self.names)
        )

    # ------------------------------------------------------------------ coordinator API

    def stub(self) -> tuple[grpc.Channel, coordinator_pb2_grpc.CoordinatorServiceStub]:
        """A leader-following stub over every replica."""
        from lockgate.common.grpc_client import open_channel

        security = self.pki.as_admin() if self.pki else None
        channel = open_channel(self.coordinator_addresses, security=security)
        return channel, coordinator_pb2_grpc.CoordinatorServiceStub(channel)

    def call(self, invoke: Callable[[coordinator_pb2_grpc.CoordinatorServiceStub], Any]) -> Any:
        """One call through a fresh leader-following channel."""
        channel, stub = self.stub()
        with channel:
            return invoke(stub)

    def cluster_info(self) -> coordinator_pb2.GetClusterInfoResponse:
        """Leader, epoch, members and executors."""
        answer: coordinator_pb2.GetClusterInfoResponse = self.call(
            lambda s: s.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=10)
        )
        return answer

    def leader_id(self) -> str:
        """Id of the current leader ('' if none)."""
        try:
            return str(self.cluster_info().leader_epoch.leader_id)
        except grpc.RpcError:
            return ""

    def pipeline_status(self, name: str) -> coordinator_pb2.GetPipelineStatusResponse:
        """GetPipelineStatus of pipeline ``name``."""
        answer: coordinator_pb2.GetPipelineStatusResponse = self.call(
            lambda s: s.GetPipelineStatus(
                coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=10
            )
        )
        return answer

    def offsets(self, name: str) -> dict[tuple[str, int], int]:
        """The pipeline's committed offsets (topic, partition) -> offset."""
        answer = self.call(
            lambda s: s.GetOffsets(
                coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=10
            )
        )
        return {(o.topic, o.partition): int(o.offset) for o in answer.offsets}

    def committed_through(
        self,
        name: str,
        ends: Mapping[tuple[str, int], int],
        *,
        after_checkpoint: int = 0,
        nothing_in_flight: bool = False,
    ) -> bool:
        """Pipeline ``name`` resumes each (topic, partition) of ``ends`` at or past its end,
        a checkpoint later than ``after_checkpoint`` is COMMITTED and none that moved the
        offsets still awaits its commit (``nothing_in_flight``: no checkpoint at all is in
        flight). The offsets are read before the status: the checkpoint that moved them is
        then at least COMPLETE in the status. (Read the other way round, a checkpoint still
        TRIGGERED in the status can be COMPLETE by the time the offsets are read, and its
        commit is not waited for.)"""
        offsets = self.offsets(name)
        status = self.pipeline_status(name)
        return (
            all(offsets.get(tp, -1) >= end for tp, end in ends.items())
            and status.last_committed_checkpoint_id > after_checkpoint
            and nothing_awaits_commit(status)
            and not (nothing_in_flight and status.in_flight_checkpoint_ids)
        )

    def checkpoints(self, name: str, page_size: int = 50) -> list[common_pb2.Checkpoint]:
        """The newest checkpoints of pipeline ``name``."""
        answer = self.call(
            lambda s: s.ListCheckpoints(
                coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=page_size),
                timeout=10,
            )
        )
        return list(answer.checkpoints)

    def all_checkpoints(self, name: str) -> list[common_pb2.Checkpoint]:
        """Every checkpoint of pipeline ``name`` the coordinator keeps, newest first (page
        after page: a pipeline checkpointing every 200 ms under load has hundreds)."""
        found: list[common_pb2.Checkpoint] = []
        token = ""
        while True:

            def page(
                stub: coordinator_pb2_grpc.CoordinatorServiceStub, token: str = token
            ) -> coordinator_pb2.ListCheckpointsResponse:
                request = coordinator_pb2.ListCheckpointsRequest(
                    pipeline_name=name, page_size=200, page_token=token
                )
                answer: coordinator_pb2.ListCheckpointsResponse = stub.ListCheckpoints(
                    request, timeout=10
                )
                return answer

            answer = self.call(page)
            found += answer.checkpoints
            token = answer.next_page_token
            if not token:
                return found

    def checkpoint_states(self, name: str) -> dict[int, int]:
        """Checkpoint id -> state (``CHECKPOINT_STATE_*``) of pipeline ``name``'s newest ones."""
        return {int(c.checkpoint_id): int(c.state) for c in self.checkpoints(name)}

    def runs_on(self, name: str, executor_id: str) -> bool:
        """True when every task of pipeline ``name`` runs on executor ``executor_id``."""
        tasks = self.pipeline_status(name).tasks
        return bool(tasks) and all(
            t.executor_id == executor_id and t.state == common_pb2.TASK_STATE_RUNNING for t in tasks
        )

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``lockgate ARGS`` against this cluster's coordinators."""
        env = {
            **os.environ,
            "LOCKGATE_COORDINATOR": ",".join(self.coordinator_addresses),
            # Wide enough that rich does not wrap table cells mid-word.
            "COLUMNS": "400",
        }
        if self.pki is not None:
            env |= {
                "LOCKGATE_TLS_CA": str(self.pki.ca),
                "LOCKGATE_TOKEN_FILE": str(self.pki.admin_token),
            }
        result = subprocess.run(
            [sys.executable, "-m", "lockgate.client.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"lockgate {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def status_json(self, name: str) -> dict[str, Any]:
        """``lockgate pipeline status NAME --json``, parsed."""
        return dict(json.loads(self.cli("pipeline", "status", name, "--json").stdout))


# ---------------------------------------------------------------------- held failpoints


def held(hold_dir: Path, failpoint: str) -> str | None:
    """The detail a process wrote when it started holding at ``failpoint`` (None: not yet)."""
    path = hold_dir / f"{failpoint}.held"
    return path.read_text().strip() if path.exists() else None


def release(hold_dir: Path, failpoint: str) -> None:
    """Let every process holding (or about to hold) at ``failpoint`` go on."""
    (hold_dir / f"{failpoint}.release").touch()


def held_checkpoint(detail: str) -> int:
    """The checkpoint a process holds at, from the detail it wrote (``... checkpoint N ...``)."""
    match = re.search(r"checkpoint (\d+)", detail)
    assert match, detail
    return int(match.group(1))


def nothing_awaits_commit(status: coordinator_pb2.GetPipelineStatusResponse) -> bool:
    """No COMPLETE checkpoint waits for its commit: the latest COMPLETE one is COMMITTED and
    no earlier one is still in flight (a checkpoint with nothing to commit is COMMITTED at
    once, so it may be COMMITTED while an earlier one's commit is still on its way)."""
    last_complete = status.last_complete_checkpoint_id
    return status.last_committed_checkpoint_id == last_complete and all(
        checkpoint_id > last_complete for checkpoint_id in status.in_flight_checkpoint_ids
    )


# ---------------------------------------------------------------------- data helpers


def pipeline_yaml(
    *,
    name: str,
    bootstrap_servers: str,
    source_topic: str,
    sink_topic: str,
    sql: str | None = None,
    delivery: str = "exactly_once",
    interval_ms: int = 1000,
    timeout_ms: int = 60000,
    tasks_max: int = 2,
    tolerance: str = "none",
    dead_letter_topic: str | None = None,
    extra_source: Mapping[str, Any] | None = None,
    extra_sink: Mapping[str, Any] | None = None,
) -> str:
    """A pipeline file in the shape of examples/copy.yaml."""
    import yaml

    source: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers,
        "topics": [source_topic],
        "starting_offsets": "earliest",
        **(extra_source or {}),
    }
    errors: dict[str, Any] = {"tolerance": tolerance}
    if dead_letter_topic:
        errors["dead_letter_topic"] = dead_letter_topic
    spec: dict[str, Any] = {
        "name": name,
        "source": {"kafka": source},
        "transform": {"sql": sql or "SELECT key, value, headers FROM input"},
        "sink": {
            "kafka": {
                "bootstrap_servers": bootstrap_servers,
                "topic": sink_topic,
                **(extra_sink or {}),
            }
        },
        "delivery": delivery,
        "checkpoint": {"interval_ms": interval_ms, "timeout_ms": timeout_ms},
        "tasks_max": tasks_max,
        "errors": errors,
    }
    return str(yaml.safe_dump(spec, sort_keys=False))


def unique(prefix: str) -> str:
    """A unique name for a topic or pipeline."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce_keyed(
    bootstrap_servers: str,
    topic: str,
    *,
    records: int,
    partitions: int,
    keys: int = 100,
    offset: int = 0,
) -> list[tuple[bytes, bytes, int]]:
    """Write ``records`` small records numbered ``offset``.. ``offset + records - 1``.

    Record ``i`` has key ``k<i % keys>`` and value ``<key>:<i // keys>`` (the key's own
    sequence number, so per-key order can be checked), in partition ``key % partitions``.
    Returns (key, value, partition) in write order.
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "enable.idempotence": True}
    )
    written: list[tuple[bytes, bytes, int]] = []
    for i in range(offset, offset + records):
        k = i % keys
        key = f"k{k:04d}".encode()
        value = f"k{k:04d}:{i // keys:08d}".encode()
        partition = k % partitions
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.1)
        written.append((key, value, partition))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "input records not all delivered"
    return written


def end_offsets(bootstrap_servers: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """High watermarks (read_committed: the last stable offsets) per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"lockgate-e2e-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        }
    )
    try:
        return {
            p: int(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[
                    1
                ]
            )
            for p in partitions
        }
    finally:
        consumer.close()


@dataclass(frozen=True)
class OutputCheck:
    """Output compared with input as multisets, plus per-key order."""

    records_in: int
    records_out: int
    duplicates: int
    missing: int
    order_violations: int


def check_output(
    expected: Sequence[tuple[bytes, bytes, int]], output: Sequence[ConsumedRecord]
) -> OutputCheck:
    """Compare ``output`` (read_committed) with the ``expected`` input records."""
    want = collections.Counter((k, v) for k, v, _ in expected)
    got = collections.Counter((r.key or b"", r.value or b"") for r in output)
    duplicates = sum(max(0, n - want.get(item, 0)) for item, n in got.items())
    missing = sum(max(0, n - got.get(item, 0)) for item, n in want.items())
    # Per-key order: within each output partition, a key's sequence numbers must grow.
    last: dict[tuple[int, bytes], int] = {}
    violations = 0
    for record in sorted(output, key=lambda r: (r.partition, r.offset)):
        key = record.key or b""
        seq = int((record.value or b"0:0").rsplit(b":", 1)[1])
        previous = last.get((record.partition, key))
        if previous is not None and seq < previous:
            violations += 1
        last[(record.partition, key)] = seq
    return OutputCheck(
        records_in=len(expected),
        records_out=len(output),
        duplicates=duplicates,
        missing=missing,
        order_violations=violations,
    )


def ongoing_transactions(bootstrap_servers: str, transactional_id_prefix: str) -> list[str]:
    """The transactional ids starting with ``transactional_id_prefix`` that have a
    transaction Ongoing on the broker (Kafka's ListTransactions, KIP-664): after a pipeline
    has settled, any of them is a hanging transaction, which would block read_committed
    readers of its partitions until ``transaction.timeout.ms``."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        listings = admin.list_transactions(state_filters=["Ongoing"])
    finally:
        admin.close()
    return sorted(
        listing.transactional_id
        for per_broker in listings.values()
        for listing in per_broker
        if listing.transactional_id.startswith(transactional_id_prefix)
    )


def read_output(bootstrap_servers: str, topic: str) -> list[ConsumedRecord]:
    """Everything read_committed readers see in ``topic``, settled."""
    return read_visible(bootstrap_servers, topic, timeout_s=60)


@dataclass
class CopyRun:
    """One pipeline of a fault test, from its input to its verdict: a new keyed source topic
    copied to a new sink topic, the records written so far, and the settle and output checks
    the fault tests end with (produce, create, fault, produce more, settle, check)."""

    cluster: ServiceCluster
    pipeline: str
    source: str
    sink: str
    partitions: int
    #: (key, value, partition) of every input record, in write order.
    written: list[tuple[bytes, bytes, int]] = field(default_factory=list)

    @classmethod
    def begin(
        cls, cluster: ServiceCluster, prefix: str, *, records: int, partitions: int = 1
    ) -> CopyRun:
        """Create the source and sink topics (names from ``prefix``) and write ``records``."""
        run = cls(
            cluster=cluster,
            pipeline=unique(prefix),
            source=unique(f"{prefix}-in"),
            sink=unique(f"{prefix}-out"),
            partitions=partitions,
        )
        for topic in (run.source, run.sink):
            create_topic(cluster.bootstrap_servers, topic, partitions=partitions)
        run.produce(records)
        return run

    def produce(self, records: int) -> None:
        """Write ``records`` more input records, numbered on from the last."""
        self.written += produce_keyed(
            self.cluster.bootstrap_servers,
            self.source,
            records=records,
            partitions=self.partitions,
            offset=len(self.written),
        )

    def create(
        self, spec_dir: Path, *, interval_ms: int, timeout_ms: int, tasks_max: int = 1
    ) -> None:
        """``lockgate pipeline create -f`` the copy, from a file written into ``spec_dir``."""
        spec = spec_dir / f"{self.pipeline}.yaml"
        spec.write_text(
            pipeline_yaml(
                name=self.pipeline,
                bootstrap_servers=self.cluster.bootstrap_servers,
                source_topic=self.source,
                sink_topic=self.sink,
                interval_ms=interval_ms,
                timeout_ms=timeout_ms,
                tasks_max=tasks_max,
            )
        )
        self.cluster.cli("pipeline", "create", "-f", str(spec))

    def copied(self, *, after_checkpoint: int = 0, nothing_in_flight: bool = False) -> bool:
        """Every record written so far is committed, by a checkpoint later than
        ``after_checkpoint``, and no COMPLETE checkpoint waits for its commit
        (``nothing_in_flight``: nor is any checkpoint in flight)."""
        per_partition = collections.Counter(partition for _, _, partition in self.written)
        ends = {(self.source, p): per_partition[p] for p in range(self.partitions)}
        return self.cluster.committed_through(
            self.pipeline,
            ends,
            after_checkpoint=after_checkpoint,
            nothing_in_flight=nothing_in_flight,
        )

    def wait_copied(
        self,
        what: str,
        *,
        timeout_s: float,
        after_checkpoint: int = 0,
        nothing_in_flight: bool = False,
        abort_if: Callable[[], str | None] | None = None,
    ) -> None:
        """Wait until :meth:`copied`; ``abort_if`` gives up at once (e.g. on a lost
        transaction)."""
        wait_for(
            what,
            lambda: self.copied(
                after_checkpoint=after_checkpoint, nothing_in_flight=nothing_in_flight
            ),
            timeout_s=timeout_s,
            abort_if=abort_if,
            explain=self.cluster.logs_tail,
        )

    def ongoing_transactions(self) -> list[str]:
        """The pipeline's transactional ids with a transaction Ongoing on the broker."""
        return ongoing_transactions(self.cluster.bootstrap_servers, f"lockgate-{self.pipeline}-")

    def wait_no_ongoing_transaction(self) -> None:
        """Wait until no transaction of the pipeline is Ongoing (once it settled: a hanging
        one would stay for transaction.timeout.ms, 15 min by default)."""
        wait_for(
            "no transaction of the pipeline left Ongoing",
            lambda: not self.ongoing_transactions(),
            timeout_s=20,
        )

    def check_exactly_once(self) -> OutputCheck:
        """What read_committed readers see in the sink must be the input exactly once (no
        duplicate, none missing) with every key's records in order; returns the comparison."""
        result = check_output(self.written, read_output(self.cluster.bootstrap_servers, self.sink))
        assert (result.records_out, result.duplicates, result.missing) == (
            len(self.written),
            0,
            0,
        ), result
        assert result.order_violations == 0, result
        return result


__all__ = [
    "DATA_LOSS_SIGNS",
    "SHORT_SESSION_ARGS",
    "ConsumedRecord",
    "CopyRun",
    "OutputCheck",
    "ProcessStartError",
    "ServiceCluster",
    "check_output",
    "end_offsets",
    "held",
    "held_checkpoint",
    "ongoing_transactions",
    "pipeline_yaml",
    "produce_keyed",
    "read_output",
    "release",
    "unique",
]
