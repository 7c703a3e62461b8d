"""One trace per checkpoint (issue 12), across real processes: a coordinator and an executor
with its SparkSession export their spans to files (the console exporter with
``LOCKGATE_TELEMETRY_CONSOLE_PATH``); every committed checkpoint is one trace holding the
leader's trigger, report, COMPLETE and commit spans and the executor's batch (with its Spark
job ids) and Kafka commit spans, parent-linked across the processes by W3C trace context; a
checkpoint held at a failpoint times out and its trace says why it aborted."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lockgate.common.failpoints import Failpoint
from lockgate.common.grpc_client import open_channel
from lockgate.localcluster.commands import coordinator_command, executor_command
from lockgate.localcluster.ports import free_port
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.support.processes import ChildProcess, failpoint_env, start_child
from tests.support.waits import wait_for

pytestmark = pytest.mark.spark

RECORDS = 40
TIMEOUT_MS = 20_000
#: The executor holds its third pre-commit before reporting it: the leader times it out.
HELD = f"{Failpoint.AFTER_PRECOMMIT_BEFORE_REPORT.value}@3:hold"


@dataclass(frozen=True)
class Span:
    """One exported span, as the console exporter wrote it."""

    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    status: str
    links: tuple[str, ...]

    @classmethod
    def parse(cls, line: str) -> Span:
        """A span from one JSON line of the exporter."""
        raw = json.loads(line)
        return cls(
            name=raw["name"],
            service=raw["resource"]["attributes"]["service.name"],
            trace_id=raw["context"]["trace_id"],
            span_id=raw["context"]["span_id"],
            parent_id=raw.get("parent_id"),
            attributes=raw.get("attributes") or {},
            status=raw["status"]["status_code"],
            links=tuple(link["context"]["trace_id"] for link in raw.get("links") or ()),
        )


def read_spans(*paths: Path) -> list[Span]:
    """Every span the processes exported so far (metrics lines are skipped)."""
    spans = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if line.strip() and '"span_id"' in line:
                spans.append(Span.parse(line))
    return spans


def telemetry_env(path: Path) -> dict[str, str]:
    """Spans to ``path``, exported within 200 ms of their end."""
    return {
        "OTEL_SDK_DISABLED": "false",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "LOCKGATE_TELEMETRY_CONSOLE_PATH": str(path),
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }


@dataclass
class Services:
    """The processes of the test and where their spans go."""

    stub: coordinator_pb2_grpc.CoordinatorServiceStub
    coordinator: ChildProcess
    executor: ChildProcess
    coordinator_spans: Path
    executor_spans: Path
    hold_dir: Path

    def died(self) -> str | None:
        """Why waiting is pointless: one of the processes exited."""
        return self.coordinator.died() or self.executor.died()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """A coordinator and a Spark executor (its third pre-commit held), both tracing."""
    address = f"127.0.0.1:{free_port()}"
    coordinator_spans, executor_spans = tmp_path / "c1.jsonl", tmp_path / "e1.jsonl"
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    coordinator = start_child(
        "c1",
        coordinator_command(
            coordinator_id="c1",
            db_url=f"sqlite:///{tmp_path / 'coordinator.db'}",
            listen=address,
            lease_ms=2000,
            extra=["--heartbeat-interval-ms", "500"],
        ),
        log_path=tmp_path / "c1.log",
        env=telemetry_env(coordinator_spans),
    )
    executor = start_child(
        "e1",
        executor_command(
            executor_id="e1",
            listen=f"127.0.0.1:{free_port()}",
            coordinators=[address],
            spark_master="local[1]",
        ),
        log_path=tmp_path / "e1.log",
        env={**telemetry_env(executor_spans), **failpoint_env(HELD, hold_dir=hold_dir)},
    )
    channel = open_channel(address, follow_leader=False)
    try:
        yield Services(
            stub=coordinator_pb2_grpc.CoordinatorServiceStub(channel),
            coordinator=coordinator,
            executor=executor,
            coordinator_spans=coordinator_spans,
            executor_spans=executor_spans,
            hold_dir=hold_dir,
        )
    finally:
        channel.close()
        (hold_dir / f"{Failpoint.AFTER_PRECOMMIT_BEFORE_REPORT.value}.release").touch()
        executor.stop()
        coordinator.stop()


def _checkpoints(services: Services, name: str) -> dict[int, common_pb2.Checkpoint]:
    response = services.stub.ListCheckpoints(
        coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=100), timeout=5
    )
    return {c.checkpoint_id: c for c in response.checkpoints}


def _executor_alive(services: Services) -> bool:
    info = services.stub.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=5)
    return any(e.state == common_pb2.EXECUTOR_STATE_ALIVE for e in info.executors)


def _run_pipeline(
    services: Services, kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> str:
    """Produce the input, create the pipeline, and wait until checkpoints 1 and 2 are
    COMMITTED and 3 is ABORTED (held at the failpoint past its timeout); its name."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(prefix="in"), new_topic(prefix="out")
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(source, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    wait_for(
        "the executor to register",
        lambda: _executor_alive(services),
        timeout_s=240,
        abort_if=services.died,
    )
    name = "traced"
    services.stub.CreatePipeline(
        coordinator_pb2.CreatePipelineRequest(
            spec=common_pb2.PipelineSpec(
                name=name,
                source=common_pb2.SourceSpec(
                    kafka=common_pb2.KafkaSourceSpec(bootstrap_servers=bootstrap, topics=[source])
                ),
                sink=common_pb2.SinkSpec(
                    kafka=common_pb2.KafkaSinkSpec(bootstrap_servers=bootstrap, topic=sink)
                ),
                checkpoint=common_pb2.CheckpointSpec(interval_ms=300, timeout_ms=TIMEOUT_MS),
                tasks_max=1,
            )
        ),
        timeout=10,
    )
    wait_for(
        "checkpoints 1 and 2 COMMITTED, 3 ABORTED",
        lambda: (
            lambda c: (
                [c[i].state for i in (1, 2, 3)]
                == [
                    common_pb2.CHECKPOINT_STATE_COMMITTED,
                    common_pb2.CHECKPOINT_STATE_COMMITTED,
                    common_pb2.CHECKPOINT_STATE_ABORTED,
                ]
                if all(i in c for i in (1, 2, 3))
                else None
            )
        )(_checkpoints(services, name)),
        timeout_s=180,
        abort_if=services.died,
    )
    return name


def _roots(spans: list[Span], name: str) -> dict[int, Span]:
    return {
        int(s.attributes["lockgate.checkpoint.id"]): s
        for s in spans
        if s.name == "lockgate.checkpoint" and s.attributes.get("lockgate.pipeline") == name
    }


def _reaches(span: Span, root: Span, by_id: dict[str, Span]) -> bool:
    """True if following parent ids from ``span`` arrives at ``root``."""
    current: Span | None = span
    while current is not None:
        if current.span_id == root.span_id:
            return True
        current = by_id.get(current.parent_id) if current.parent_id else None
    return False


def test_each_checkpoint_is_one_trace_across_coordinator_and_executor(
    services: Services, kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    """Committed checkpoints: one trace each with the leader's and the executor's spans,
    every one of them reaching the root through its parents (so across the processes by
    W3C context); the batch that read the input names its Spark jobs. The timed-out
    checkpoint's root is an ERROR carrying the abort reason, and so is its abort span."""
    name = _run_pipeline(services, kafka_broker, new_topic)
    paths = (services.coordinator_spans, services.executor_spans)

    def exported() -> list[Span] | None:
        spans = read_spans(*paths)
        roots = _roots(spans, name)
        if not all(i in roots for i in (1, 2, 3)):
            return None
        committed_traces = {roots[i].trace_id for i in (1, 2)}
        executor_commits = [
            s
            for s in spans
            if s.name == "lockgate.executor.commit" and s.trace_id in committed_traces
        ]
        return spans if executor_commits else None

    spans = wait_for("the spans of checkpoints 1-3", exported, timeout_s=30)
    by_id = {s.span_id: s for s in spans}
    roots = _roots(spans, name)
    with_records = 0
    for checkpoint_id in (1, 2):
        root = roots[checkpoint_id]
        assert root.parent_id is None and root.status == "OK", root
        assert root.service == "lockgate-coordinator"
        assert root.attributes["lockgate.leader_epoch"] >= 1
        trace = [s for s in spans if s.trace_id == root.trace_id]
        names = {(s.service, s.name) for s in trace}
        for expected in (
            ("lockgate-coordinator", "lockgate.checkpoint.trigger"),
            ("lockgate-coordinator", "lockgate.checkpoint.report_precommit"),
            ("lockgate-coordinator", "lockgate.checkpoint.complete"),
            ("lockgate-executor", "lockgate.executor.precommit"),
        ):
            assert expected in names, (checkpoint_id, expected, sorted(names))
        assert all(_reaches(s, root, by_id) for s in trace), [
            s.name for s in trace if not _reaches(s, root, by_id)
        ]
        (batch,) = [s for s in trace if s.name == "lockgate.executor.precommit"]
        if batch.attributes["lockgate.records.read"] > 0:
            with_records += 1
            assert batch.attributes["lockgate.spark.job_ids"], batch
            assert ("lockgate-executor", "lockgate.executor.commit") in names, sorted(names)
            assert ("lockgate-coordinator", "lockgate.checkpoint.commit") in names, sorted(names)
        else:
            # The batch left no transaction: nothing for an executor to commit. The leader
            # wrote COMMITTED with the last report, or in a commit step that called no
            # executor when checkpoint 1 was still committing then.
            assert ("lockgate-executor", "lockgate.executor.commit") not in names, sorted(names)
        assert root.attributes["lockgate.checkpoint.state"] == "COMMITTED", root
        # The report travelled from the batch: its parent chain passes through the batch.
        (report,) = [s for s in trace if s.name == "lockgate.checkpoint.report_precommit"]
        assert _reaches(report, batch, by_id), "the report is not under the executor's batch"
    assert with_records == 1, "checkpoint 1 read the input, checkpoint 2 found none"

    aborted = roots[3]
    reason = aborted.attributes["lockgate.abort_reason"]
    assert aborted.status == "ERROR" and f"timed out after {TIMEOUT_MS} ms" in reason, aborted
    assert aborted.attributes["lockgate.checkpoint.state"] == "ABORTED"
    (abort,) = [
        s for s in spans if s.trace_id == aborted.trace_id and s.name == "lockgate.checkpoint.abort"
    ]
    assert abort.status == "ERROR" and abort.attributes["lockgate.abort_reason"] == reason
    assert len({r.trace_id for r in roots.values()}) == len(roots), "one trace per checkpoint"
