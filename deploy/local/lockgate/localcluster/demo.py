"""``python -m lockgate.localcluster.demo``: the real demo, against a running local cluster.

What ``make demo`` shows after ``cluster up`` (broker, schema registry, coordinators
c1..c3, executors e1..e2):

1. an input topic seeded with 200,000 records over 4 partitions;
2. the copy pipeline of ``examples/copy.yaml`` (this run's own topic and pipeline names)
   created with ``lockgate pipeline create -f``;
3. a progress bar of the committed source offsets while it copies, and one executor
   SIGKILLed midway, during a checkpoint;
4. a ``read_committed`` check: records in, records out, duplicates, missing, wall time,
   records/s.

Exit status 0 when the output equals the input exactly once, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from confluent_kafka import Producer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from lockgate.common.grpc_client import open_channel
from lockgate.common.security import (
    SecurityConfigError,
    add_client_security_arguments,
    client_security,
)
from lockgate.localcluster.kafka import (
    LIBRDKAFKA_LOGGER,
    client_config,
    create_topic,
    read_visible,
)
from lockgate.localcluster.process import (
    is_alive,
    lockgate_home,
    log_path,
    read_pid_file,
    repo_root,
)
from lockgate.localcluster.services import COORDINATOR_PORTS
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

_console = Console()


@dataclass(frozen=True)
class DemoResult:
    """The read_committed check of one demo run."""

    records_in: int
    records_out: int
    duplicates: int
    missing: int
    wall_time_s: float

    @property
    def exactly_once(self) -> bool:
        """True when every input record is in the output once."""
        return self.records_in == self.records_out and self.duplicates == self.missing == 0


def seed_input(bootstrap_servers: str, topic: str, *, records: int, partitions: int) -> None:
    """Write ``records`` small keyed records, value ``rec-<n>`` (unique), over the partitions."""
    producer = Producer(client_config(bootstrap_servers, {"linger.ms": 50}))
    for n in range(records):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"key-{n % 1000}".encode(),
                    value=f"rec-{n:09d}".encode(),
                    partition=n % partitions,
                )
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not write the input to {topic!r} within 120 s")


def pipeline_file(
    *, example: Path, name: str, bootstrap_servers: str, source: str, sink: str, directory: Path
) -> Path:
    """``examples/copy.yaml`` with this run's pipeline name, topics and broker."""
    spec: dict[str, Any] = yaml.safe_load(example.read_text())
    spec["name"] = name
    spec["source"]["kafka"]["topics"] = [source]
    spec["source"]["kafka"]["bootstrap_servers"] = bootstrap_servers
    spec["sink"]["kafka"]["topic"] = sink
    spec["sink"]["kafka"]["bootstrap_servers"] = bootstrap_servers
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@dataclass(frozen=True)
class PipelineProgress:
    """What the leader says about the pipeline right now."""

    committed: int
    in_flight: bool


def pipeline_progress(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, pipeline: str
) -> PipelineProgress | None:
    """Committed source offsets and whether a checkpoint is in flight (None: no leader)."""
    try:
        offsets = stub.GetOffsets(
            coordinator_pb2.GetOffsetsRequest(pipeline_name=pipeline), timeout=5
        )
        status = stub.GetPipelineStatus(
            coordinator_pb2.GetPipelineStatusRequest(name=pipeline), timeout=5
        )
    except grpc.RpcError:
        return None
    return PipelineProgress(
        committed=sum(int(o.offset) for o in offsets.offsets),
        in_flight=bool(status.in_flight_checkpoint_ids),
    )


def kill_executor(home: Path, name: str) -> int | None:
    """SIGKILL the executor recorded in ``name``'s pid file; returns its pid if it ran."""
    record = read_pid_file(home, name)
    if record is None or not is_alive(record):
        return None
    os.kill(record.pid, signal.SIGKILL)
    return record.pid


def check(bootstrap_servers: str, sink: str, *, records: int, began: float) -> DemoResult:
    """Read the sink read_committed and compare it with the seeded values."""
    output = read_visible(bootstrap_servers, sink, timeout_s=120)
    counts = collections.Counter(r.value for r in output)
    wanted = {f"rec-{n:09d}".encode() for n in range(records)}
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = len(wanted - counts.keys())
    return DemoResult(
        records_in=records,
        records_out=len(output),
        duplicates=duplicates,
        missing=missing,
        wall_time_s=time.monotonic() - began,
    )


def log_librdkafka_to_file(path: Path) -> None:
    """Send librdkafka's log lines to `path` instead of the demo's output, which shows only
    the demo's own lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    librdkafka = logging.getLogger(LIBRDKAFKA_LOGGER)
    librdkafka.addHandler(handler)
    librdkafka.setLevel(logging.INFO)
    librdkafka.propagate = False


def run(args: argparse.Namespace) -> int:
    """The demo; returns the exit status."""
    home = lockgate_home(args.home)
    log_librdkafka_to_file(log_path(home, "demo-librdkafka"))
    run_id = uuid.uuid4().hex[:6]
    source, sink, name = f"demo-input-{run_id}", f"demo-output-{run_id}", f"copy-{run_id}"
    bootstrap = args.bootstrap_servers

    _console.print(
        f"[bold]1.[/bold] seeding {source}: {args.records:,} records over "
        f"{args.partitions} partitions"
    )
    create_topic(bootstrap, source, partitions=args.partitions)
    create_topic(bootstrap, sink, partitions=args.partitions)
    seed_input(bootstrap, source, records=args.records, partitions=args.partitions)
    began = time.monotonic()
    if not _create_pipeline(args, name=name, source=source, sink=sink):
        return 1

    _console.print(
        f"[bold]3.[/bold] copying {source} -> {sink} exactly once; {args.kill} is SIGKILLed midway"
    )
    with open_channel(list(args.coordinator), security=args.security) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        killed = _follow_the_copy(args, stub, name=name, home=home, began=began)
        if killed is None:
            return 1
        history = stub.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=1000), timeout=10
        ).checkpoints
    states = collections.Counter(
        common_pb2.CheckpointState.Name(c.state).removeprefix("CHECKPOINT_STATE_").lower()
        for c in history
    )
    _console.print(
        "   checkpoints: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    )
    _console.print("[bold]4.[/bold] reading the output with a read_committed consumer")
    result = check(bootstrap, sink, records=args.records, began=began)
    _print_check(name, result)
    if killed > 0:
        _console.print(f"executor {args.kill} stays down; `make cluster-up` starts it again.")
    if result.exactly_once:
        _console.print("[green]exactly once: every record once, none missing[/green]")
        return 0
    _console.print("[red]NOT exactly once[/red]")
    return 1


def _create_pipeline(args: argparse.Namespace, *, name: str, source: str, sink: str) -> bool:
    """Step 2: `lockgate pipeline create -f` on the example, named for this run."""
    with tempfile.TemporaryDirectory(prefix="lockgate-demo-") as tmp:
        spec = pipeline_file(
            example=args.example,
            name=name,
            bootstrap_servers=args.bootstrap_servers,
            source=source,
            sink=sink,
            directory=Path(tmp),
        )
        _console.print(f"[bold]2.[/bold] lockgate pipeline create -f {spec}  (from {args.example})")
        created = subprocess.run(
            [sys.executable, "-m", "lockgate.client.cli", "pipeline", "create", "-f", str(spec)],
            env={
                **os.environ,
                "LOCKGATE_COORDINATOR": ",".join(args.coordinator),
                # The CLI finds the same CA and admin token as the demo does.
                "LOCKGATE_HOME": str(lockgate_home(args.home)),
            },
            capture_output=True,
            text=True,
            check=False,
        )
    if created.returncode != 0:
        _console.print(f"[red]pipeline create failed:[/red]\n{created.stdout}{created.stderr}")
        return False
    return True


def _follow_the_copy(
    args: argparse.Namespace,
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
    *,
    name: str,
    home: Path,
    began: float,
) -> int | None:
    """Step 3: a progress bar of committed records until all are, SIGKILLing the chosen
    executor midway. The killed pid (-1: it was not running, 0: not killed yet when the copy
    ended), or None if the copy did not finish within the timeout."""
    killed = 0
    deadline = began + args.timeout
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console,
    ) as progress:
        bar = progress.add_task("committed", total=args.records)
        while True:
            now = pipeline_progress(stub, name)
            if now is not None:
                progress.update(bar, completed=now.committed)
                if now.committed >= args.records:
                    return killed
                # Midway: before half the input is committed, while a checkpoint's
                # pre-commit is running (the whole backlog may fit in one checkpoint).
                if not killed and now.in_flight and time.monotonic() - began >= args.kill_after:
                    pid = kill_executor(home, f"executor-{args.kill}")
                    progress.console.print(
                        f"  SIGKILL executor {args.kill} (pid {pid}) with "
                        f"{now.committed:,} records committed and a checkpoint in flight"
                        if pid
                        else f"  executor {args.kill} was not running: nothing to kill"
                    )
                    killed = pid or -1
            if time.monotonic() > deadline:
                _console.print(f"[red]not all records committed within {args.timeout:.0f} s[/red]")
                return None
            time.sleep(0.05)  # polling pace: short, not to miss a short checkpoint in flight


def _print_check(name: str, result: DemoResult) -> None:
    """Step 4's table: records in and out, duplicates, missing, wall time, records/s."""
    table = Table(title=f"pipeline {name}: read_committed check")
    for column in ("records in", "records out", "duplicates", "missing", "wall time", "records/s"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{result.records_in:,}",
        f"{result.records_out:,}",
        str(result.duplicates),
        str(result.missing),
        f"{result.wall_time_s:.1f} s",
        f"{result.records_in / result.wall_time_s:,.0f}",
    )
    _console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lockgate.localcluster.demo``."""
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.localcluster.demo",
        description="Copy a seeded topic through the copy pipeline while an executor is killed.",
    )
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument(
        "--coordinator",
        action="append",
        default=None,
        help="coordinator address (repeatable; default the three local replicas)",
    )
    parser.add_argument("--records", type=int, default=200_000, help="input records")
    parser.add_argument("--partitions", type=int, default=4, help="input partitions")
    parser.add_argument("--kill", default="e2", help="executor id to SIGKILL midway")
    parser.add_argument(
        "--kill-after",
        type=float,
        default=2.0,
        help="seconds after creating the pipeline from which the kill may happen",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to finish in")
    parser.add_argument("--home", type=Path, default=None, help="cluster home (pid files)")
    parser.add_argument(
        "--example",
        type=Path,
        default=repo_root() / "examples" / "copy.yaml",
        help="pipeline file to start from",
    )
    add_client_security_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.security = client_security(args, home=lockgate_home(args.home))
    except SecurityConfigError as exc:
        parser.error(str(exc))
    if args.records < 1 or args.partitions < 1:
        parser.error("--records and --partitions must be >= 1")
    if args.coordinator is None:
        args.coordinator = [f"127.0.0.1:{port}" for port in COORDINATOR_PORTS]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
