"""Benchmark of the coordinator: leader failover time and checkpoint round-trip overhead.

Three measurements, each on SQLite and on PostgreSQL (``--db sqlite|postgres|both``), with
real processes only (``python -m lockgate.coordinator``, ``python -m lockgate.executor``,
a KRaft broker, a throwaway PostgreSQL):

* **Failover.** Three coordinator replicas on one fresh database. ``--kills`` times: find
  the leader every replica agrees on, SIGKILL it, and time from the kill until
  ``GetClusterInfo`` on a survivor names a new leader with a higher epoch; then restart
  the killed replica (same id) and wait until it answers. Printed per lease
  (``--lease-ms``, default 1000; ``--lease-ms 1000,3000`` for both): p50 and max, the
  ratio of p50 to the target (lease + 1 s), and where the time went (lease left at the
  kill, takeover after the lease expired, polling granularity of this benchmark).
* **Checkpoint round trip.** Three replicas, ``--executors`` executors with
  ``--data-plane none`` (empty pre-commits: no Spark, no data), one pipeline over a
  100-partition topic with ``tasks_max: 100`` and a short checkpoint interval. After a
  few warm-up checkpoints, ``--checkpoints`` checkpoints' trigger -> COMMITTED durations
  are read from ``ListCheckpoints`` (the coordinator's own timings, on the database's
  clock). Printed: p50 and p99 and the ratio of p99 to the target (< 100 ms), split into
  trigger -> COMPLETE and COMPLETE -> COMMITTED (no handle to commit: the report's write
  marks both, so the second is the database clock's steps between them), with the CPU
  each process spent per checkpoint and the leader's CPU with the pipeline paused
  (everything but checkpoints: heartbeats, lease, work loop), so a miss says where the
  time goes. A pipeline that commits nothing for ``--stall-s`` seconds is reported as
  STALLED with what was measured.

* **Scale** (``coordinator_scale.py``). One replica, ``--scale-executors`` control-only
  executors, ``--scale-pipelines`` pipelines of ``--scale-tasks`` tasks at
  ``--scale-interval-ms``: p50/p99 trigger lag against < 500 ms and the leader's CPU in
  cores against < 1, over ``--scale-duration-s``. The defaults are the issue's 1,000 x 10
  on 20 executors; a 2-core machine shared with other work cannot hold that: pass smaller
  sizes (``--skip scale`` leaves it out).

Every process runs with TLS and tokens as the local cluster does (a throwaway CA in the
home, the executors behind mTLS), the benchmark calling as the admin; ``--insecure`` measures
them in plaintext. The whole default run takes about 4.5 minutes on an idle 2-core machine
(7 under load); ``--lease-ms 1000,3000`` adds about 2 minutes. Figures, not pass/fail. The
machine's load average is printed with them: other work on the same cores moves every number
here.

    .venv/bin/python bench/coordinator.py [--db both] [--kills 10] [--checkpoints 50]

Every process it starts is stopped at the end (also on Ctrl-C and SIGTERM). Logs stay in
the printed directory only if something failed (``--keep-logs`` keeps them always).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TypeVar

import grpc
from coordinator_scale import ScaleResult, ScaleSize, print_scale, run_scale
from proctree import cpu_seconds

from lockgate.common.grpc_client import open_channel
from lockgate.common.security import ClientSecurity
from lockgate.localcluster.certs import LocalPki, ensure_local_pki
from lockgate.localcluster.commands import coordinator_command, executor_command
from lockgate.localcluster.kafka import KafkaBrokerConfig, broker_spec, create_topic
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.postgres import PostgresCluster, unique_database_name
from lockgate.localcluster.process import (
    PidRecord,
    ProcessError,
    ProcessSpec,
    RunningProcess,
    is_alive,
    start_process,
    stop_process,
    tail,
    wait_until,
)
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

#: Failover target: p50 <= lease + this.
FAILOVER_SLACK_S = 1.0
#: Round-trip target: p99 below this.
ROUND_TRIP_P99_TARGET_MS = 100.0
#: Checkpoints left out at the start of a round-trip run (first triggers, cold caches).
WARMUP_CHECKPOINTS = 3
#: How often the failover watcher asks a survivor (the measurement's granularity).
FAILOVER_POLL_S = 0.01
#: Seconds of leader CPU sampling with the pipeline paused (the baseline without checkpoints).
IDLE_WINDOW_S = 5.0
#: Replicas in every measurement, as `make cluster-up` runs them.
REPLICAS = 3

_T = TypeVar("_T")


class BenchError(RuntimeError):
    """The benchmark could not set up or measure; the message says what and where."""


# ---------------------------------------------------------------------------------------
# small helpers


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 50 values is their maximum)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def load_average() -> str:
    """The 1-minute load average and the core count, e.g. ``load 3.2 on 2 cores``."""
    try:
        one_minute = os.getloadavg()[0]
    except OSError:
        return "load unknown"
    return f"load {one_minute:.1f} on {os.cpu_count()} cores"


def poll(what: str, condition: Callable[[], _T | None], *, timeout_s: float) -> _T:
    """Poll ``condition`` (RPC errors count as "not yet") until truthy; BenchError at the
    deadline naming ``what`` and the last error."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while True:
        try:
            value = condition()
        except grpc.RpcError as exc:
            last_error = f"{exc.code().name}: {exc.details()}"
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise BenchError(f"{what} did not happen within {timeout_s:.0f} s ({last_error})")
        time.sleep(0.02)  # polling interval of a condition wait


# ---------------------------------------------------------------------------------------
# processes


@dataclass
class Replica:
    """One coordinator replica this benchmark runs (restarted under the same id)."""

    coordinator_id: str
    address: str
    process: RunningProcess
    channel: grpc.Channel

    def info(self, timeout_s: float = 2.0) -> coordinator_pb2.GetClusterInfoResponse:
        """GetClusterInfo as this replica answers it (no leader following)."""
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(self.channel)
        response: coordinator_pb2.GetClusterInfoResponse = stub.GetClusterInfo(
            coordinator_pb2.GetClusterInfoRequest(), timeout=timeout_s
        )
        return response


@dataclass
class Processes:
    """Every process and channel of one measurement, stopped by :meth:`stop_all`."""

    home: Path
    db_url: str
    replicas: dict[str, Replica] = field(default_factory=dict)
    executors: list[RunningProcess] = field(default_factory=list)
    channels: list[grpc.Channel] = field(default_factory=list)
    pki: LocalPki | None = None
    """TLS and tokens as the local cluster (None: plaintext, ``--insecure``)."""

    def secure(self) -> None:
        """Make a throwaway CA and tokens in the home; every process started next uses them."""
        self.pki = ensure_local_pki(self.home, [f"e{i}" for i in range(1, 9)])

    @property
    def security(self) -> ClientSecurity | None:
        """How this benchmark calls the coordinators: the admin over TLS, or plaintext."""
        return None if self.pki is None else self.pki.as_admin()

    def start_replica(self, coordinator_id: str, *, lease_ms: int) -> Replica:
        """Start (or restart) replica ``coordinator_id`` on a new port; wait until it answers."""
        address = f"127.0.0.1:{free_port()}"
        channel = open_channel(address, follow_leader=False, security=self.security)
        self.channels.append(channel)
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)

        def answers() -> bool:
            try:
                stub.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=1)
            except grpc.RpcError:
                return False
            return True

        spec = ProcessSpec(
            name=coordinator_id,
            argv=tuple(
                coordinator_command(
                    coordinator_id=coordinator_id,
                    db_url=self.db_url,
                    listen=address,
                    advertise=address,
                    lease_ms=lease_ms,
                    extra=self.pki.coordinator_args() if self.pki else (),
                )
            ),
            address=address,
            ready=answers,
            cwd=self.home,
            ready_timeout_s=120.0,
        )
        replica = Replica(coordinator_id, address, start_process(spec, home=self.home), channel)
        self.replicas[coordinator_id] = replica
        return replica

    def start_executor(self, executor_id: str, coordinators: Sequence[str]) -> RunningProcess:
        """Start a ``--data-plane none`` executor; wait until the cluster lists it ALIVE."""
        address = f"127.0.0.1:{free_port()}"
        leader_channel = self.leader_channel(coordinators)
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(leader_channel)

        def registered() -> bool:
            try:
                info = stub.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=1)
            except grpc.RpcError:
                return False
            return any(
                e.executor_id == executor_id and e.state == common_pb2.EXECUTOR_STATE_ALIVE
                for e in info.executors
            )

        spec = ProcessSpec(
            name=executor_id,
            argv=tuple(
                executor_command(
                    executor_id=executor_id,
                    listen=address,
                    coordinators=coordinators,
                    data_plane="none",
                    extra=self.pki.executor_args(executor_id) if self.pki else (),
                )
            ),
            address=address,
            ready=registered,
            env=self.pki.executor_env(executor_id) if self.pki else {},
            cwd=self.home,
            ready_timeout_s=120.0,
        )
        process = start_process(spec, home=self.home)
        self.executors.append(process)
        return process

    def leader_channel(self, coordinators: Sequence[str]) -> grpc.Channel:
        """A leader-following channel to the cluster (closed by :meth:`stop_all`)."""
        channel = open_channel(list(coordinators), security=self.security)
        self.channels.append(channel)
        return channel

    def alive_replicas(self) -> list[Replica]:
        """Replicas whose process still runs."""
        return [
            r
            for r in self.replicas.values()
            if is_alive(PidRecord(r.process.pid, _start_time(r.process)))
        ]

    def stop_all(self) -> None:
        """Stop every process this measurement started (by pid file) and close channels."""
        for process in self.executors:
            stop_process(home=self.home, name=process.name, grace_s=10.0)
        for replica in self.replicas.values():
            stop_process(home=self.home, name=replica.coordinator_id, grace_s=10.0)
        for channel in self.channels:
            channel.close()
        self.channels.clear()


def _start_time(process: RunningProcess) -> int:
    """The start time recorded in ``process``'s pid file (-1 once the file is gone)."""
    try:
        return int(process.pid_file.read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def sigkill(process: RunningProcess) -> None:
    """SIGKILL exactly ``process`` (checked against its pid file) and wait until it is gone."""
    record = PidRecord(process.pid, _start_time(process))
    if not is_alive(record):
        raise BenchError(
            f"{process.name} (pid {process.pid}) is not running; see {process.log_file}"
        )
    os.kill(process.pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(record), timeout_s=10.0, description=f"{process.name} exit")
    process.pid_file.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------
# databases


class Databases:
    """Fresh state databases on demand: SQLite files, or databases of one PostgreSQL."""

    def __init__(self, home: Path) -> None:
        self._home = home
        self._postgres: PostgresCluster | None = None

    def fresh(self, kind: str, label: str) -> str:
        """The URL of a new, empty database of ``kind`` (``sqlite`` or ``postgres``)."""
        if kind == "sqlite":
            return f"sqlite:///{self._home / f'{label}-{uuid.uuid4().hex[:8]}.db'}"
        if self._postgres is None:
            self._postgres = PostgresCluster().start()
        return self._postgres.create_database(unique_database_name(f"bench_{label}"))

    def server_pid(self, kind: str) -> int | None:
        """The pid of the database server of ``kind`` (PostgreSQL's postmaster, once
        started); None for SQLite, which runs in its callers' processes."""
        return self._postgres.pid if kind == "postgres" and self._postgres else None

    def close(self) -> None:
        """Stop PostgreSQL if it was started (its directory goes with it)."""
        if self._postgres is not None:
            self._postgres.stop()
            self._postgres = None


# ---------------------------------------------------------------------------------------
# failover


@dataclass(frozen=True)
class Failover:
    """One SIGKILL of the leader and what followed."""

    seconds: float
    """Kill -> a survivor names a new leader with a higher epoch."""
    lease_left_s: float
    """Old lease's expiry (database clock) minus the kill's wall time."""
    takeover_s: float
    """New lease's acquisition minus the old lease's expiry: the followers' poll delay."""
    observed_s: float
    """Kill-to-seen minus the two above: this benchmark's polling and RPC time."""
    epochs: tuple[int, int]


@dataclass(frozen=True)
class FailoverResult:
    """Failovers of one database and lease."""

    db: str
    lease_ms: int
    runs: list[Failover]

    @property
    def target_s(self) -> float:
        """lease + 1 s."""
        return self.lease_ms / 1000 + FAILOVER_SLACK_S


def agreed_leader(processes: Processes) -> tuple[Replica, int]:
    """The replica every live replica names as leader, and its epoch."""

    def agreement() -> tuple[Replica, int] | None:
        infos = [r.info() for r in processes.alive_replicas()]
        leaders = {(i.leader_epoch.leader_id, i.leader_epoch.epoch) for i in infos}
        if len(leaders) != 1:
            return None
        ((leader_id, epoch),) = leaders
        replica = processes.replicas.get(leader_id)
        return (replica, epoch) if replica is not None else None

    return poll("the replicas to agree on a leader", agreement, timeout_s=60)


def measure_failover(processes: Processes, *, lease_ms: int, kills: int) -> list[Failover]:
    """SIGKILL the leader ``kills`` times, restarting it after each; one Failover per kill."""
    runs: list[Failover] = []
    for _ in range(kills):
        leader, epoch = agreed_leader(processes)
        survivors = [r for r in processes.alive_replicas() if r is not leader]
        killed_wall_ms = time.time() * 1000
        killed_at = time.monotonic()
        sigkill(leader.process)
        old_expiry_ms: int | None = None
        new_info: coordinator_pb2.GetClusterInfoResponse | None = None
        turn = 0
        deadline = killed_at + 10 * lease_ms / 1000 + 30
        while new_info is None:
            if time.monotonic() > deadline:
                raise BenchError(
                    f"no new leader {time.monotonic() - killed_at:.1f} s after killing "
                    f"{leader.coordinator_id} (epoch {epoch}); see the logs in {processes.home}"
                )
            survivor = survivors[turn % len(survivors)]
            turn += 1
            try:
                info = survivor.info(timeout_s=1.0)
            except grpc.RpcError:
                time.sleep(FAILOVER_POLL_S)
                continue
            if info.leader_epoch.epoch == epoch and info.HasField("lease_expire_time"):
                # The dead leader renews no more: the last expiry seen is the final one.
                old_expiry_ms = info.lease_expire_time.ToMilliseconds()
            elif (
                info.leader_epoch.epoch > epoch
                and info.leader_epoch.leader_id != leader.coordinator_id
            ):
                new_info = info
                break
            time.sleep(FAILOVER_POLL_S)
        seconds = time.monotonic() - killed_at
        # The first sight of the new term comes well within its first renewal (lease / 4),
        # so its expiry minus the lease is when it was acquired, on the database's clock.
        acquired_ms = new_info.lease_expire_time.ToMilliseconds() - lease_ms
        if old_expiry_ms is None:
            lease_left_s = takeover_s = math.nan
        else:
            lease_left_s = (old_expiry_ms - killed_wall_ms) / 1000
            takeover_s = (acquired_ms - old_expiry_ms) / 1000
        runs.append(
            Failover(
                seconds=seconds,
                lease_left_s=lease_left_s,
                takeover_s=takeover_s,
                observed_s=seconds - (acquired_ms - killed_wall_ms) / 1000,
                epochs=(epoch, new_info.leader_epoch.epoch),
            )
        )
        processes.start_replica(leader.coordinator_id, lease_ms=lease_ms)
    return runs


def run_failover(
    databases: Databases, home: Path, *, db: str, lease_ms: int, kills: int, secure: bool
) -> FailoverResult:
    """Three replicas on a fresh ``db`` database; ``kills`` leader kills."""
    label = f"failover-{db}-{lease_ms}"
    processes = Processes(home=home / label, db_url=databases.fresh(db, label.replace("-", "_")))
    processes.home.mkdir(parents=True)
    if secure:
        processes.secure()
    try:
        for index in range(REPLICAS):
            processes.start_replica(f"c{index + 1}", lease_ms=lease_ms)
        runs = measure_failover(processes, lease_ms=lease_ms, kills=kills)
    finally:
        processes.stop_all()
    return FailoverResult(db=db, lease_ms=lease_ms, runs=runs)


def print_failover(result: FailoverResult) -> None:
    """One block of figures for one database and lease."""
    seconds = [r.seconds for r in result.runs]
    p50, worst = statistics.median(seconds), max(seconds)
    ratio = p50 / result.target_s
    verdict = "meets" if p50 <= result.target_s else "MISSES"
    print(
        f"failover  {result.db:<8} lease {result.lease_ms:>5} ms  kills {len(seconds):>2}  "
        f"p50 {p50:6.3f} s  max {worst:6.3f} s  target p50 <= {result.target_s:.1f} s  "
        f"ratio {ratio:.2f} ({verdict})"
    )

    def median_of(values: list[float]) -> float:
        known = [v for v in values if not math.isnan(v)]
        return statistics.median(known) if known else math.nan

    print(
        "          where it goes (p50): lease left at the kill "
        f"{median_of([r.lease_left_s for r in result.runs]):.3f} s, takeover after expiry "
        f"{median_of([r.takeover_s for r in result.runs]):.3f} s (followers poll every "
        f"{max(0.02, result.lease_ms / 4000):.3f} s), seen by this benchmark after "
        f"{median_of([r.observed_s for r in result.runs]):.3f} s"
    )
    planned = len(result.runs)
    changes = result.runs[-1].epochs[1] - result.runs[0].epochs[0]
    if changes != planned:
        print(
            f"          {changes - planned} leader changes beside the {planned} kills (a leader "
            "lost its lease without being killed)"
        )
    print(
        "          each kill (s): "
        + " ".join(f"{s:.2f}" for s in seconds)
        + f"; epochs {result.runs[0].epochs[0]} -> {result.runs[-1].epochs[1]}"
    )


# ---------------------------------------------------------------------------------------
# checkpoint round trip


@dataclass(frozen=True)
class RoundTripResult:
    """Committed checkpoints of one database, with the CPU spent on them."""

    db: str
    tasks: int
    executors: int
    interval_ms: int
    total_ms: list[float]
    precommit_ms: list[float]
    commit_ms: list[float]
    aborted: list[str]
    cpu_ms_per_checkpoint: dict[str, float]
    wall_s_per_checkpoint: float
    leader_refusals: int
    """Calls the leader answered NOT_LEADER while it still held the lease in SQL (its
    lease renewal came too late for its local deadline)."""
    leader_busy_ms_per_s: float
    """Leader CPU per second of wall time while checkpoints ran."""
    leader_idle_ms_per_s: float | None
    """Leader CPU per second with the pipeline paused (tasks assigned, executors
    heartbeating, no checkpoints): the cost of everything but the checkpoints."""
    epochs: tuple[int, int]
    stall: str | None
    """Why fewer than ``wanted`` checkpoints were measured (None when all were)."""
    wanted: int


def start_broker(home: Path) -> KafkaBrokerConfig:
    """A KRaft broker on free ports in ``home`` (stopped with ``stop_process``)."""
    last: Exception | None = None
    for attempt in range(3):
        config = KafkaBrokerConfig(
            home=home / f"kafka-{attempt}", port=free_port(), controller_port=free_port()
        )
        if config.port == config.controller_port:
            continue
        try:
            start_process(broker_spec(config, ready_timeout_s=180.0), home=config.home)
        except Exception as exc:  # a port taken between probe and bind: try new ones
            stop_process(home=config.home, name="kafka")
            last = exc
            continue
        return config
    raise BenchError(f"could not start a Kafka broker: {last}")


def list_checkpoints(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str
) -> list[common_pb2.Checkpoint]:
    """Every checkpoint of pipeline ``name``, oldest first."""
    found: list[common_pb2.Checkpoint] = []
    token = ""
    while True:
        page = stub.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(
                pipeline_name=name, page_size=1000, page_token=token
            ),
            timeout=10,
        )
        found.extend(page.checkpoints)
        token = page.next_page_token
        if not token:
            return sorted(found, key=lambda c: c.checkpoint_id)


#: A checkpoint in one of these states changes no more.
FINAL_STATES = frozenset(
    {
        common_pb2.CHECKPOINT_STATE_COMMITTED,
        common_pb2.CHECKPOINT_STATE_ABORTED,
        common_pb2.CHECKPOINT_STATE_DATA_LOST,
    }
)


class CommittedAfter:
    """Pipeline ``name``'s checkpoints committed after checkpoint ``after``, oldest first,
    as each call reads them. A call reads the history newest first, and only back to the
    oldest checkpoint after ``after`` it has not yet seen final: it costs the leader what
    changed since the last call. Reading the whole history each time (every 0.5 s, one
    row and message per checkpoint) grew with the run, and the leader it measures paid."""

    def __init__(
        self, stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str, *, after: int
    ) -> None:
        self._stub, self._name, self._after = stub, name, after
        self._final: dict[int, common_pb2.Checkpoint] = {}
        self._unsettled = after + 1  # the oldest one after `after` not seen final yet

    def __call__(self) -> list[common_pb2.Checkpoint]:
        token = ""
        while True:
            page = self._stub.ListCheckpoints(
                coordinator_pb2.ListCheckpointsRequest(
                    pipeline_name=self._name, page_size=100, page_token=token
                ),
                timeout=10,
            )
            for c in page.checkpoints:
                if c.checkpoint_id > self._after and c.state in FINAL_STATES:
                    self._final[c.checkpoint_id] = c
            token = page.next_page_token
            if not token or any(c.checkpoint_id <= self._unsettled for c in page.checkpoints):
                break
        while self._unsettled in self._final:
            self._unsettled += 1
        return [
            c
            for _, c in sorted(self._final.items())
            if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
        ]


def leader_cpu_while_paused(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str, leader_pid: int
) -> float | None:
    """Pause the pipeline, wait until nothing is in flight and every task reports PAUSED,
    and return the leader's CPU ms per second over :data:`IDLE_WINDOW_S` (None if it did
    not settle). Until the tasks report PAUSED the pause itself is still going on (full
    assignment answers, the tasks' state writes): not the baseline."""
    stub.PausePipeline(coordinator_pb2.PausePipelineRequest(name=name), timeout=30)

    def settled() -> bool:
        status = stub.GetPipelineStatus(
            coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=10
        )
        paused = all(t.state == common_pb2.TASK_STATE_PAUSED for t in status.tasks)
        return paused and not status.in_flight_checkpoint_ids

    try:
        poll("the paused pipeline's last checkpoints to finish", settled, timeout_s=30)
    except BenchError:
        return None
    before, began = cpu_seconds(leader_pid), time.monotonic()
    time.sleep(IDLE_WINDOW_S)  # the measurement window itself, not a wait for an event
    return (cpu_seconds(leader_pid) - before) * 1000 / (time.monotonic() - began)


def collect_committed(
    committed: Callable[[], list[common_pb2.Checkpoint]], *, count: int, stall_s: float
) -> tuple[list[common_pb2.Checkpoint], str | None]:
    """Wait until ``committed()`` returns ``count`` checkpoints; stop early, with the
    reason, when none is added for ``stall_s`` seconds (a stuck pipeline is a figure too)."""
    seen: list[common_pb2.Checkpoint] = []
    progressed_at = time.monotonic()
    while len(seen) < count:
        try:
            now = committed()
        except grpc.RpcError as exc:
            now = seen
            error = f"; last error {exc.code().name}: {exc.details()}"
        else:
            error = ""
        if len(now) > len(seen):
            seen, progressed_at = now, time.monotonic()
        elif time.monotonic() - progressed_at > stall_s:
            last = seen[-1].checkpoint_id if seen else "the warm-up"
            return seen, f"no checkpoint committed for {stall_s:.0f} s after {last}{error}"
        time.sleep(0.5)  # polling interval of the history
    return seen[:count], None


def run_round_trip(
    databases: Databases,
    home: Path,
    bootstrap: str,
    *,
    db: str,
    tasks: int,
    executors: int,
    checkpoints: int,
    interval_ms: int,
    stall_s: float,
    secure: bool,
) -> RoundTripResult:
    """One pipeline of ``tasks`` tasks on ``executors`` control-only executors; the
    trigger -> COMMITTED timings of ``checkpoints`` checkpoints after the warm-up."""
    label = f"roundtrip-{db}"
    processes = Processes(home=home / label, db_url=databases.fresh(db, label.replace("-", "_")))
    processes.home.mkdir(parents=True)
    if secure:
        processes.secure()
    suffix = uuid.uuid4().hex[:8]
    source, sink, name = f"bench-src-{suffix}", f"bench-sink-{suffix}", f"bench-{suffix}"
    create_topic(bootstrap, source, partitions=tasks)
    create_topic(bootstrap, sink, partitions=1)
    try:
        for index in range(REPLICAS):
            processes.start_replica(f"c{index + 1}", lease_ms=3_000)
        addresses = [r.address for r in processes.replicas.values()]
        for index in range(executors):
            processes.start_executor(f"e{index + 1}", addresses)
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(processes.leader_channel(addresses))
        spec = common_pb2.PipelineSpec(
            name=name,
            source=common_pb2.SourceSpec(
                kafka=common_pb2.KafkaSourceSpec(bootstrap_servers=bootstrap, topics=[source])
            ),
            sink=common_pb2.SinkSpec(
                kafka=common_pb2.KafkaSinkSpec(bootstrap_servers=bootstrap, topic=sink)
            ),
            # A generous timeout: a slow checkpoint is a figure to report, not an abort.
            checkpoint=common_pb2.CheckpointSpec(interval_ms=interval_ms, timeout_ms=30_000),
            tasks_max=tasks,
        )
        stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=60)

        def all_running() -> bool:
            status = stub.GetPipelineStatus(
                coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=10
            )
            return len(status.tasks) == tasks and all(
                t.state == common_pb2.TASK_STATE_RUNNING for t in status.tasks
            )

        poll(f"the {tasks} tasks to run", all_running, timeout_s=120)

        warm, stall = collect_committed(
            CommittedAfter(stub, name, after=0), count=WARMUP_CHECKPOINTS, stall_s=stall_s
        )
        if stall is not None:
            epoch = agreed_leader(processes)[1]
            raise BenchError(
                f"the pipeline stalled during the warm-up ({len(warm)} of {WARMUP_CHECKPOINTS} "
                f"checkpoints committed): {stall}; leader epoch now {epoch}; see "
                f"{processes.home}/log"
            )
        first = warm[-1].checkpoint_id
        leader, first_epoch = agreed_leader(processes)
        pids = {"leader": leader.process.pid}
        pids |= {p.name: p.pid for p in processes.executors}
        cpu_before = {k: cpu_seconds(pid) for k, pid in pids.items()}
        began = time.monotonic()
        measured, stall = collect_committed(
            CommittedAfter(stub, name, after=first), count=checkpoints, stall_s=stall_s
        )
        elapsed = time.monotonic() - began
        cpu_after = {k: cpu_seconds(pid) for k, pid in pids.items()}
        everything = list_checkpoints(stub, name)
        idle_ms_per_s = leader_cpu_while_paused(stub, name, leader.process.pid)
        last_epoch = agreed_leader(processes)[1]
        if not measured:
            raise BenchError(f"no checkpoint of {name} was committed after the warm-up: {stall}")
    finally:
        processes.stop_all()
    # The whole log: the stop at the end adds no such line (the lease is released).
    refusals = leader.process.log_file.read_text(errors="replace").count(
        "not the leader and no leader is elected yet"
    )
    last = measured[-1].checkpoint_id
    # CPU and wall time are spread over every checkpoint in the window (overlap included).
    spanned = max(1, sum(1 for c in everything if first < c.checkpoint_id <= last))
    return RoundTripResult(
        db=db,
        tasks=tasks,
        executors=executors,
        interval_ms=interval_ms,
        total_ms=[float(c.total_duration_ms) for c in measured],
        precommit_ms=[float(c.precommit_duration_ms) for c in measured],
        commit_ms=[float(c.commit_duration_ms) for c in measured],
        aborted=[
            f"{c.checkpoint_id}: {c.abort_reason}"
            for c in everything
            if c.state == common_pb2.CHECKPOINT_STATE_ABORTED and first < c.checkpoint_id <= last
        ],
        cpu_ms_per_checkpoint={
            k: (cpu_after[k] - cpu_before[k]) * 1000 / spanned for k in cpu_before
        },
        wall_s_per_checkpoint=elapsed / spanned,
        leader_refusals=refusals,
        leader_busy_ms_per_s=(cpu_after["leader"] - cpu_before["leader"]) * 1000 / elapsed,
        leader_idle_ms_per_s=idle_ms_per_s,
        epochs=(first_epoch, last_epoch),
        stall=stall,
        wanted=checkpoints,
    )


def print_round_trip(result: RoundTripResult) -> None:
    """One block of figures for one database."""
    p50, p99 = percentile(result.total_ms, 0.50), percentile(result.total_ms, 0.99)
    ratio = p99 / ROUND_TRIP_P99_TARGET_MS
    verdict = "meets" if p99 < ROUND_TRIP_P99_TARGET_MS else "MISSES"
    print(
        f"roundtrip {result.db:<8} {result.tasks} tasks on {result.executors} executors, "
        f"interval {result.interval_ms} ms, {len(result.total_ms)} checkpoints  "
        f"p50 {p50:6.0f} ms  p99 {p99:6.0f} ms  target p99 < {ROUND_TRIP_P99_TARGET_MS:.0f} ms  "
        f"ratio {ratio:.2f} ({verdict})"
    )
    print(
        "          trigger -> COMPLETE (trigger RPCs, executors' empty pre-commits, "
        f"{result.tasks} task reports in ReportPrecommits batches) "
        f"p50 {percentile(result.precommit_ms, 0.5):.0f} ms  "
        f"p99 {percentile(result.precommit_ms, 0.99):.0f} ms"
    )
    print(
        "          COMPLETE -> COMMITTED (the empty pre-commits leave no handle: COMMITTED"
        " is written with COMPLETE, no commit RPC)"
        f" p50 {percentile(result.commit_ms, 0.5):.0f} ms  "
        f"p99 {percentile(result.commit_ms, 0.99):.0f} ms"
    )
    cpu = ", ".join(f"{k} {v:.0f} ms" for k, v in result.cpu_ms_per_checkpoint.items())
    print(
        f"          CPU per checkpoint: {cpu}; one checkpoint every "
        f"{result.wall_s_per_checkpoint * 1000:.0f} ms of wall time"
    )
    idle = result.leader_idle_ms_per_s
    print(
        f"          leader CPU: {result.leader_busy_ms_per_s:.0f} ms per s while checkpointing, "
        + (
            f"{idle:.0f} ms per s with the pipeline paused (heartbeats of {result.tasks} "
            "assigned tasks, lease, work loop; no checkpoints)"
            if idle is not None
            else "paused baseline not measured (in-flight checkpoints did not settle)"
        )
    )
    per_report = percentile(result.precommit_ms, 0.5) / result.tasks
    print(
        f"          = {per_report:.1f} ms per task report at p50 (the {result.tasks} reports "
        "go in one ReportPrecommits call per executor for those ready together; calls that "
        "reach the leader together share one write transaction)"
    )
    if result.leader_refusals:
        print(
            f"          the leader answered {result.leader_refusals} calls NOT_LEADER while its "
            "lease was still its own in SQL (a renewal came after its local deadline); "
            f"leader epoch {result.epochs[0]} -> {result.epochs[1]}"
        )
    if result.aborted:
        print(
            f"          {len(result.aborted)} aborted in the window, e.g. "
            f"{'; '.join(result.aborted[:3])}"
        )
    if result.stall is not None:
        print(
            f"          STALLED: {len(result.total_ms)} of {result.wanted} checkpoints measured; "
            f"{result.stall}; leader epoch {result.epochs[0]} -> {result.epochs[1]}"
        )


# ---------------------------------------------------------------------------------------
# main


def _leases(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--lease-ms must be whole milliseconds, comma-separated (e.g. 1000,3000), got {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"--lease-ms values must be > 0, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(
        description="Coordinator failover time and checkpoint round-trip overhead "
        "(figures, not pass/fail)."
    )
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--kills", type=int, default=10, help="leader kills per lease (>= 1)")
    parser.add_argument(
        "--lease-ms",
        type=_leases,
        default=[1000],
        help="leases to test, comma-separated, e.g. 1000,3000 (3000 adds ~2 minutes per database)",
    )
    parser.add_argument(
        "--checkpoints", type=int, default=50, help="measured checkpoints per database (>= 1)"
    )
    parser.add_argument("--tasks", type=int, default=100, help="tasks of the pipeline (>= 1)")
    parser.add_argument("--executors", type=int, default=2, help="executors (1 to 8)")
    parser.add_argument(
        "--interval-ms", type=int, default=100, help="checkpoint interval of the pipeline (ms)"
    )
    parser.add_argument(
        "--stall-s",
        type=float,
        default=30.0,
        help="stop a round-trip run that commits nothing for this long (s), and say so",
    )
    parser.add_argument(
        "--skip",
        choices=("failover", "roundtrip", "scale"),
        action="append",
        default=[],
        help="leave out one measurement (repeatable)",
    )
    scale = parser.add_argument_group(
        "scale run (issue 14: 1,000 pipelines x 10 tasks on 20 executors)"
    )
    scale.add_argument("--scale-pipelines", type=int, default=1000, help="pipelines (>= 1)")
    scale.add_argument("--scale-tasks", type=int, default=10, help="tasks per pipeline (>= 1)")
    scale.add_argument("--scale-executors", type=int, default=20, help="executors (>= 1)")
    scale.add_argument(
        "--scale-interval-ms", type=int, default=1000, help="checkpoint interval (ms)"
    )
    scale.add_argument("--scale-duration-s", type=float, default=60.0, help="measured window (s)")
    scale.add_argument(
        "--scale-ready-s",
        type=float,
        default=600.0,
        help="give up if some pipeline has committed nothing this long after the setup (s)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no authentication (default: TLS + tokens, as the local cluster)",
    )
    return parser


def run_scale_on(
    databases: Databases, home: Path, bootstrap: str, kind: str, args: argparse.Namespace
) -> ScaleResult:
    """The scale run (`coordinator_scale.py`) on a fresh database of ``kind``."""
    label = f"scale-{kind}"
    processes = Processes(home=home / label, db_url=databases.fresh(kind, label.replace("-", "_")))
    processes.home.mkdir(parents=True)
    return run_scale(
        processes,
        bootstrap,
        db=kind,
        database_pid=databases.server_pid(kind),
        size=ScaleSize(
            pipelines=args.scale_pipelines,
            tasks=args.scale_tasks,
            executors=args.scale_executors,
            interval_ms=args.scale_interval_ms,
            duration_s=args.scale_duration_s,
        ),
        ready_timeout_s=args.scale_ready_s,
    )


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # SIGTERM becomes SystemExit so the `finally` blocks stop every process started.
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def bench_home(keep: bool) -> Iterator[Path]:
    """A temporary directory for logs, SQLite files and the broker; removed unless the
    run failed or ``keep``."""
    home = Path(tempfile.mkdtemp(prefix="lockgate-bench-coord-"))
    failed = True
    try:
        yield home
        failed = False
    finally:
        if failed or keep:
            print(f"logs kept in {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurements and print their figures."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.kills < 1 or args.checkpoints < 1 or args.tasks < 1:
        parser.error("--kills, --checkpoints and --tasks must be at least 1")
    if not 1 <= args.executors <= 8:
        parser.error(f"--executors must be 1 to 8, got {args.executors}")
    if args.interval_ms < 1:
        parser.error(f"--interval-ms must be >= 1, got {args.interval_ms}")
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    began = time.monotonic()
    print(f"coordinator benchmark: {load_average()} at the start")
    failures: list[str] = []
    with bench_home(args.keep_logs) as home:

        def failed(what: str, exc: Exception) -> None:
            # One measurement failing (a stuck pipeline, say) does not hide the others.
            print(f"{what}: FAILED: {exc}")
            failures.append(what)

        databases = Databases(home)
        try:
            if "failover" not in args.skip:
                for kind in kinds:
                    for lease_ms in args.lease_ms:
                        try:
                            result = run_failover(
                                databases,
                                home,
                                db=kind,
                                lease_ms=lease_ms,
                                kills=args.kills,
                                secure=not args.insecure,
                            )
                        except (BenchError, ProcessError, TimeoutError) as exc:
                            failed(f"failover {kind} lease {lease_ms} ms", exc)
                            continue
                        print_failover(result)
            broker: KafkaBrokerConfig | None = None
            if "roundtrip" not in args.skip or "scale" not in args.skip:
                try:
                    broker = start_broker(home)
                except BenchError as exc:
                    failed("roundtrip (the Kafka broker)", exc)
            if broker is not None:
                try:
                    for kind in kinds if "roundtrip" not in args.skip else []:
                        try:
                            trip = run_round_trip(
                                databases,
                                home,
                                broker.bootstrap_servers,
                                db=kind,
                                tasks=args.tasks,
                                executors=args.executors,
                                checkpoints=args.checkpoints,
                                interval_ms=args.interval_ms,
                                stall_s=args.stall_s,
                                secure=not args.insecure,
                            )
                        except (BenchError, ProcessError, TimeoutError) as exc:
                            failed(f"roundtrip {kind}", exc)
                            continue
                        print_round_trip(trip)
                        if trip.stall is not None:
                            failures.append(f"roundtrip {kind} (stalled)")
                    for kind in kinds if "scale" not in args.skip else []:
                        try:
                            print_scale(
                                run_scale_on(databases, home, broker.bootstrap_servers, kind, args)
                            )
                        except (BenchError, ProcessError, TimeoutError, grpc.RpcError) as exc:
                            failed(f"scale {kind}", exc)
                finally:
                    stop_process(home=broker.home, name="kafka")
        finally:
            databases.close()
        print(f"done in {time.monotonic() - began:.0f} s; {load_average()} at the end")
        if failures:
            for log in sorted(home.rglob("log/*.log")):
                print(f"--- last lines of {log}:\n{tail(log, lines=5)}", file=sys.stderr)
            # Leaving the block by an exception keeps the logs for a look.
            raise SystemExit(f"incomplete: {', '.join(failures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
