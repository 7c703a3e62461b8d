"""A backlog several times `source.kafka.max_records_per_partition` drains in steps (issue
14, hole 4), back to back (issue 13): a coordinator and a Spark executor as processes, a
real broker; every checkpoint reads at most the cap from each partition, the one after a
capped checkpoint does not wait for the interval, and the output equals the input."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from lockgate.localcluster.kafka import create_topic
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    ServiceCluster,
    check_output,
    end_offsets,
    pipeline_yaml,
    produce_keyed,
    read_output,
    unique,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

#: 5,000 records per partition under a cap of 1,500: four capped steps each, as many as
#: 20,000 under 3,000 gave, for half the records to copy and read back.
RECORDS, PARTITIONS, CAP = 10_000, 2, 1_500
#: Longer than the whole drain takes back to back: a capped checkpoint's successor that
#: waited for it would take the drain past three intervals.
INTERVAL_MS = 30_000


def test_a_backlog_larger_than_one_checkpoint_drains_in_capped_steps_back_to_back(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    cluster = ServiceCluster(home=tmp_path / "services", bootstrap_servers=bootstrap)
    try:
        cluster.start_coordinator("c1")
        wait_for("a leader", lambda: bool(cluster.leader_id()), timeout_s=30)
        source, sink = unique("backlog_in"), unique("backlog_out")
        create_topic(bootstrap, source, partitions=PARTITIONS)
        create_topic(bootstrap, sink)
        written = produce_keyed(bootstrap, source, records=RECORDS, partitions=PARTITIONS)
        ends = end_offsets(bootstrap, source, range(PARTITIONS))
        cluster.start_executor("e1")
        name = unique("backlog")
        spec = tmp_path / "backlog.yaml"
        spec.write_text(
            pipeline_yaml(
                name=name,
                bootstrap_servers=bootstrap,
                source_topic=source,
                sink_topic=sink,
                interval_ms=INTERVAL_MS,
                tasks_max=1,
                extra_source={"max_records_per_partition": CAP},
            )
        )
        cluster.cli("pipeline", "create", "-f", str(spec))

        wait_for(
            "the backlog to drain",
            lambda: cluster.committed_through(name, {(source, p): e for p, e in ends.items()}),
            timeout_s=300,
            explain=cluster.logs_tail,
        )

        checkpoints = sorted(cluster.all_checkpoints(name), key=lambda c: c.checkpoint_id)
        committed = [
            c.checkpoint_id for c in checkpoints if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
        ]
        # Every checkpoint but the first followed a capped one (the backlog was there before
        # the pipeline): each was triggered as soon as the one before it was COMPLETE.
        triggers_ms = [c.trigger_time.ToMilliseconds() for c in checkpoints]
        gaps = [b - a for a, b in itertools.pairwise(triggers_ms)]
        assert gaps, checkpoints
        assert max(gaps) < INTERVAL_MS / 3, gaps
        sizes: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        for checkpoint_id in committed:
            answer = cluster.call(
                lambda s, c=checkpoint_id: s.GetCheckpoint(
                    coordinator_pb2.GetCheckpointRequest(pipeline_name=name, checkpoint_id=c),
                    timeout=10,
                )
            )
            for task in answer.checkpoint.tasks:
                for r in task.source_ranges:
                    sizes[r.partition].append(r.end_offset - r.start_offset)
        for partition, steps in sizes.items():
            assert max(steps) <= CAP, (partition, steps)
            assert sum(steps) == ends[partition], (partition, steps)
            assert sum(1 for n in steps if n) >= math.ceil(ends[partition] / CAP), steps
        result = check_output(written, read_output(bootstrap, sink))
        assert (result.duplicates, result.missing, result.order_violations) == (0, 0, 0), result
    finally:
        cluster.stop_all()
