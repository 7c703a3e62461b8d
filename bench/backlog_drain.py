"""A backlog drains in capped checkpoints at a steady rate (issue 14, hole 4).

    .venv/bin/python bench/backlog_drain.py [--records 2000000] [--partitions 4] [--cap 0]

Starts its own Kafka broker, one coordinator and one executor (``--spark-master``, default
``local[2]``) in a temporary home, writes ``--records`` records of ``--value-bytes`` to an
input topic *before* any pipeline exists (the backlog), then creates one exactly-once copy
pipeline with ``source.kafka.max_records_per_partition`` = ``--cap`` (0: the spec's default)
and times it from creation until a COMMITTED checkpoint covers the whole input. The services
run with TLS and tokens, as the local cluster does (a throwaway CA in the home); ``--insecure``
runs them in plaintext.

Printed: the overall rate (records/s), the number of checkpoints, the records each read
(largest per partition against the cap), each checkpoint's rate (its records over its
trigger -> COMMITTED time) as p50/min/max with min/p50 as the steadiness ratio, its longest
pre-commit against ``checkpoint.timeout_ms`` (the cap exists so that one fits well within
it), and how many checkpoints aborted. Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc
import yaml
from eos_throughput import produce_input  # bench/ is the script's own directory

from lockgate.common.grpc_client import open_channel
from lockgate.common.model.pipeline_spec import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    parse_pipeline_spec,
)
from lockgate.common.model.proto import spec_to_proto
from lockgate.localcluster.certs import ensure_local_pki
from lockgate.localcluster.kafka import KafkaBrokerConfig, broker_spec, create_topic
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.process import (
    ProcessSpec,
    RunningProcess,
    start_process,
    stop_process,
    wait_until,
)
from lockgate.localcluster.services import coordinator_spec, executor_spec
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

TIMEOUT_MS = 60_000


def pipeline_file(
    path: Path, *, name: str, bootstrap: str, source: str, sink: str, cap: int, tasks_max: int
) -> None:
    """The copy pipeline, the checkpoint timeout at its default."""
    kafka_source: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "topics": [source],
        "starting_offsets": "earliest",
    }
    if cap:
        kafka_source["max_records_per_partition"] = cap
    spec = {
        "name": name,
        "source": {"kafka": kafka_source},
        "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink}},
        "checkpoint": {"interval_ms": 200, "timeout_ms": TIMEOUT_MS},
        "tasks_max": tasks_max,
    }
    path.write_text(yaml.safe_dump(spec))


def drain(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, *, name: str, spec: Path, records: int
) -> float:
    """Create the pipeline; wait until a COMMITTED checkpoint covers the input. Seconds."""
    began = time.monotonic()
    stub.CreatePipeline(
        coordinator_pb2.CreatePipelineRequest(
            spec=spec_to_proto(parse_pipeline_spec(yaml.safe_load(spec.read_text())))
        ),
        timeout=30,
    )
    complete_at = 0

    def done() -> bool:
        nonlocal complete_at
        try:
            if not complete_at:
                answer = stub.GetOffsets(
                    coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=5
                )
                if sum(int(o.offset) for o in answer.offsets) >= records:
                    complete_at = int(answer.checkpoint_id)
                return False
            status = stub.GetPipelineStatus(
                coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
            )
        except grpc.RpcError:
            return False
        return int(status.last_committed_checkpoint_id) >= complete_at

    wait_until(done, timeout_s=7200, description=f"{name} to drain", interval_s=0.2)
    return time.monotonic() - began


def report(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
    *,
    name: str,
    cap: int,
    seconds: float,
    records: int,
) -> None:
    """Print the per-checkpoint figures of a drained pipeline."""
    history = stub.ListCheckpoints(
        coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=1000), timeout=30
    ).checkpoints
    committed = sorted(
        (c for c in history if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED),
        key=lambda c: c.checkpoint_id,
    )
    aborted = sum(1 for c in history if c.state == common_pb2.CHECKPOINT_STATE_ABORTED)
    rates: list[float] = []
    largest = 0
    for c in committed:
        detail = stub.GetCheckpoint(
            coordinator_pb2.GetCheckpointRequest(pipeline_name=name, checkpoint_id=c.checkpoint_id),
            timeout=10,
        ).checkpoint
        sizes = [r.end_offset - r.start_offset for t in detail.tasks for r in t.source_ranges]
        largest = max([largest, *sizes])
        if sum(sizes) and c.total_duration_ms:
            rates.append(sum(sizes) / (c.total_duration_ms / 1000))
    precommit = max((c.precommit_duration_ms for c in committed), default=0)
    print(
        f"\nbacklog of {records:,} records drained in {seconds:.1f}s:"
        f" {records / seconds:,.0f} records/s"
    )
    print(f"checkpoints: {len(committed)} committed, {aborted} aborted")
    print(f"largest range of one partition in one checkpoint: {largest:,} (cap {cap:,})")
    if rates:
        p50 = statistics.median(rates)
        print(
            f"per-checkpoint rate, records/s: p50 {p50:,.0f}  min {min(rates):,.0f}"
            f"  max {max(rates):,.0f}  (steadiness min/p50 = {min(rates) / p50:.2f})"
        )
    print(
        f"longest pre-commit: {precommit:,} ms = {precommit / TIMEOUT_MS:.0%} of"
        f" checkpoint.timeout_ms ({TIMEOUT_MS:,} ms)"
    )
    load = os.getloadavg()
    print(
        f"load average now: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
        " (other work on the same cores moves every figure)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Fill a backlog, drain it with one pipeline, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--cap", type=int, default=0, help="0: the spec's default")
    parser.add_argument("--tasks-max", type=int, default=2)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no authentication (default: TLS + tokens)",
    )
    args = parser.parse_args(argv)
    cap = args.cap or DEFAULT_MAX_RECORDS_PER_PARTITION
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-") as tmp:
        home = Path(tmp)
        started: list[tuple[Path, RunningProcess]] = []

        def start(spec: ProcessSpec, where: Path) -> RunningProcess:
            process = start_process(spec, home=where)
            started.append((where, process))
            return process

        try:
            config = KafkaBrokerConfig(
                home=home / "kafka", port=free_port(), controller_port=free_port()
            )
            start(broker_spec(config), config.home)
            bootstrap = config.bootstrap_servers
            # Secure by default, as the local cluster: a throwaway CA and tokens in the home.
            pki = None if args.insecure else ensure_local_pki(home, ["e1"])
            print(f"services: {'plaintext' if pki is None else 'TLS + tokens (mTLS to executors)'}")
            port = free_port()
            coordinator = f"127.0.0.1:{port}"
            start(
                coordinator_spec(
                    coordinator_id="c1", port=port, db_url=f"sqlite:///{home / 'c.db'}", pki=pki
                ),
                home,
            )
            source, sink = (
                f"backlog-in-{uuid.uuid4().hex[:6]}",
                f"backlog-out-{uuid.uuid4().hex[:6]}",
            )
            create_topic(bootstrap, source, partitions=args.partitions)
            create_topic(bootstrap, sink, partitions=args.partitions)
            t0 = time.monotonic()
            produce_input(
                bootstrap,
                source,
                records=args.records,
                partitions=args.partitions,
                size=args.value_bytes,
            )
            print(
                f"backlog: {args.records:,} records x {args.value_bytes} B"
                f" in {time.monotonic() - t0:.1f}s"
            )
            t0 = time.monotonic()
            start(
                executor_spec(
                    executor_id="e1",
                    port=free_port(),
                    coordinators=[coordinator],
                    spark_master=args.spark_master,
                    spark_conf={},
                    pki=pki,
                ),
                home,
            )
            print(f"executor ready (Spark {args.spark_master}) in {time.monotonic() - t0:.1f}s")
            name = f"backlog-{uuid.uuid4().hex[:6]}"
            spec = home / "backlog.yaml"
            pipeline_file(
                spec,
                name=name,
                bootstrap=bootstrap,
                source=source,
                sink=sink,
                cap=args.cap,
                tasks_max=args.tasks_max,
            )
            security = None if pki is None else pki.as_admin()
            with open_channel([coordinator], security=security) as channel:
                stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
                seconds = drain(stub, name=name, spec=spec, records=args.records)
                report(stub, name=name, cap=cap, seconds=seconds, records=args.records)
        finally:
            for where, process in reversed(started):
                stop_process(home=where, name=process.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
