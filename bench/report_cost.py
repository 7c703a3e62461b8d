"""What recording executors' pre-commit reports costs the leader, in its own process (issue 14).

    .venv/bin/python bench/report_cost.py [--pipelines 15] [--tasks 10] [--rounds 30]

At scale the leader's threads queue at one place: the replica's write turn
(`store/write_turn.py`), and the transaction the executors' ReportPrecommits calls share
(`CheckpointStore.record_precommit_batch`) held it 40-70 % of the time in the scale runs
(README, issue 14). Those runs' figures swing from run to run with the machine; this one
times that transaction alone, in its own process, so a change to it can be measured.

A leader replica over a fresh SQLite file (no Kafka, no executor processes, no gRPC):
``--pipelines`` pipelines of ``--tasks`` tasks (one source partition each) spread over
``--executors`` executors, every task RUNNING. Each round triggers the next checkpoint of every
pipeline (one trigger transaction, as a pass does) and then records every task's pre-commit,
without transaction handles, in one batch, the way the executors' calls that arrive together
are written: every checkpoint turns COMPLETE and, having nothing to commit, COMMITTED in that
transaction, with its history pruning (``--keep-history``). After ``--warmup`` rounds, prints
the batch's time (p50, min) and per report, and the split of its time by step (cProfile, over
the same number of rounds run again). Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from lockgate.common.model.ids import CoordinatorId, ExecutorId, PipelineId
from lockgate.common.model.offsets import OffsetRange, TopicPartition
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.domain.tasks import split_partitions
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.membership import HeartbeatTaskReport
from lockgate.coordinator.store import open_store

#: The steps of the report transaction, as the functions cProfile names them.
STEPS = {
    "snapshot reads": "precommit_snapshot",
    "checks": "sort_precommits",
    "pre-commit rows": "write_precommits",
    "COMPLETE, COMMITTED, pruning": "_complete",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=15)
    parser.add_argument("--tasks", type=int, default=10, help="tasks per pipeline")
    parser.add_argument("--executors", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30, help="timed checkpoints")
    parser.add_argument("--warmup", type=int, default=3, help="untimed checkpoints first")
    parser.add_argument("--keep-history", type=int, default=1_000)
    return parser


def _spec(name: str, tasks: int) -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": name,
            "tasks_max": tasks,
            "checkpoint": {"interval_ms": 1_000},
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
        }
    )


class Leader:
    """A leading replica with its pipelines created and every task RUNNING."""

    def __init__(self, db: Path, args: argparse.Namespace) -> None:
        self.store = open_store(f"sqlite:///{db}")
        self.herder = Herder(
            store=self.store,
            settings=CoordinatorSettings(
                coordinator_id=CoordinatorId("c1"),
                advertise="127.0.0.1:7071",
                lease_ms=600_000,
                session_timeout_ms=600_000,
            ),
        )
        self.herder.lease_keeper.campaign()
        fence = self.herder.require_fence()
        self.names = [PipelineId(f"p{i:04d}") for i in range(args.pipelines)]
        partitions = [TopicPartition("in", p) for p in range(args.tasks)]
        for name in self.names:
            self.store.pipelines.create_pipeline(
                fence=fence,
                spec=_spec(name, args.tasks),
                splits=split_partitions(partitions, args.tasks),
                target_state=TargetState.RUNNING,
            )
        membership = self.herder.membership
        generations = {
            ExecutorId(f"e{i}"): membership.register_executor(
                executor_id=ExecutorId(f"e{i}"), address="127.0.0.1:1"
            ).executor.generation
            for i in range(args.executors)
        }
        membership.rebalance(fence, membership.cluster_view())
        for executor_id, generation in generations.items():
            assigned = membership.heartbeat(
                executor_id=executor_id, generation=generation, reports=[]
            )
            membership.heartbeat(
                executor_id=executor_id,
                generation=generation,
                reports=[
                    HeartbeatTaskReport(
                        task_id=a.task.task_id,
                        task_generation=a.task.generation,
                        state=TaskState.RUNNING,
                        error=None,
                    )
                    for a in assigned.tasks
                ],
            )
        self.generations = generations
        self.partitions = {
            t.task_id: t.partitions
            for name in self.names
            for t in self.store.pipelines.list_tasks(pipeline_id=name)
        }

    def trigger(self) -> list[CheckpointRecord]:
        """The next checkpoint of every pipeline, in one transaction as a pass writes them."""
        triggered = self.store.checkpoints.trigger_checkpoints(
            fence=self.herder.require_fence(), pipeline_ids=self.names
        )
        records = []
        for name, answer in triggered.items():
            if not isinstance(answer, CheckpointRecord):
                raise SystemExit(f"could not trigger {name}: {answer}")
            records.append(answer)
        return records

    def reports(self, checkpoints: Sequence[CheckpointRecord], records: int) -> list[Precommit]:
        """Every task's pre-commit of its checkpoint: the next `records` of each partition."""
        reports = []
        for checkpoint in checkpoints:
            start = (checkpoint.checkpoint_id - 1) * records
            for trigger in checkpoint.tasks:
                assert trigger.executor_id is not None
                reports.append(
                    Precommit(
                        pipeline_id=checkpoint.pipeline_id,
                        checkpoint_id=checkpoint.checkpoint_id,
                        task_id=trigger.task_id,
                        task_generation=trigger.task_generation,
                        executor_id=trigger.executor_id,
                        executor_generation=self.generations[trigger.executor_id],
                        offsets=tuple(
                            OffsetRange(tp.topic, tp.partition, start, start + records)
                            for tp in self.partitions[trigger.task_id]
                        ),
                        handles=(),
                    )
                )
        return reports

    def record(self, reports: Sequence[Precommit], keep_history: int) -> None:
        """The reports in one transaction; every checkpoint must end COMMITTED."""
        answers = self.store.checkpoints.record_precommit_batch(
            fence=self.herder.require_fence(),
            precommits=reports,
            committed=[],
            keep_history=keep_history,
        )
        wrong = [a for a in answers if getattr(a, "state", None) is not CheckpointState.COMMITTED]
        if wrong:
            raise SystemExit(f"a report was not recorded as expected: {wrong[0]}")


def run(
    leader: Leader, args: argparse.Namespace, rounds: int, profile: cProfile.Profile | None
) -> list[float]:
    """`rounds` checkpoints of every pipeline; the report transaction's times (s)."""
    times = []
    for _ in range(rounds):
        reports = leader.reports(leader.trigger(), records=5)
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        leader.record(reports, args.keep_history)
        if profile is not None:
            profile.disable()
        times.append(time.perf_counter() - started)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lockgate-report-cost-") as home:
        leader = Leader(Path(home) / "state.db", args)
        try:
            run(leader, args, args.warmup, None)
            times = run(leader, args, args.rounds, None)
            profile = cProfile.Profile()
            run(leader, args, args.rounds, profile)
        finally:
            leader.store.close()
    reports = args.pipelines * args.tasks
    p50 = statistics.median(times)
    print(
        f"report transaction: {args.pipelines} pipelines x {args.tasks} tasks = {reports} reports"
        f" per batch, {args.rounds} batches after {args.warmup} untimed, SQLite, in this process"
    )
    print(
        f"    p50 {p50 * 1000:.1f} ms (min {min(times) * 1000:.1f} ms) a batch,"
        f" {p50 * 1e6 / reports:.0f} us a report"
    )
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]

    def cumulative(function: str) -> float:
        """The time spent in calls of `function`, the calls it made included."""
        return float(sum(c for (_, _, name), (_, _, _, c, _) in stats.items() if name == function))

    total = cumulative("record_precommit_batch")
    shares = {label: 100 * cumulative(function) / total for label, function in STEPS.items()}
    split = "; ".join(f"{label} {share:.0f} %" for label, share in shares.items())
    rest = 100 - sum(shares.values())
    print(
        f"    its time under cProfile: {split}; the rest (begin, fence check, answers, commit)"
        f" {rest:.0f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
