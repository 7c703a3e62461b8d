"""Each service's /metrics while a pipeline runs on real processes (issue 12).

A Kafka broker, a coordinator and an executor with its SparkSession, each serving
``--metrics-listen`` on a free port, scraped over HTTP as Prometheus does. The executor's
first pre-commit is held at a failpoint until the leader times the checkpoint out; then
the pipeline catches up. What a user would check on a dashboard:

- the aborted-checkpoint counter moves, labelled with its reason (timeout);
- the lag gauge shows the whole input while nothing is COMPLETE, and 0 once the input stops
  and is committed; ``GetPipelineStatus`` and ``lockgate pipeline status`` say the same;
- the records-written counter equals what a read_committed consumer sees in the sink;
- checkpoint durations, visibility latency and gRPC server calls are recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    ServiceCluster,
    held,
    pipeline_yaml,
    produce_keyed,
    read_output,
    release,
    unique,
)
from tests.support.metrics import scrape, series_value
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

RECORDS = 200
HOLD = "after_precommit_before_report"


def _value(address: str, series: str, **labels: str) -> float | None:
    return series_value(scrape(address), series, **labels)


def test_metrics_of_a_pipeline_with_a_forced_abort(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    cluster = ServiceCluster(
        home=tmp_path / "home",
        bootstrap_servers=bootstrap,
        coordinator_args=("--heartbeat-interval-ms", "500"),
        with_metrics=True,
    )
    source, sink, name = unique("in"), unique("out"), unique("metrics")
    kafka_broker.create_topic(source, partitions=2)
    kafka_broker.create_topic(sink, partitions=1)
    produced = produce_keyed(bootstrap, source, records=RECORDS, partitions=2)
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(
        pipeline_yaml(
            name=name,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            interval_ms=500,
            timeout_ms=15_000,
            tasks_max=1,
        )
    )
    try:
        cluster.start_coordinator("c1")
        cluster.start_executor("e1", failpoints=f"{HOLD}@1:hold", hold_dir=hold_dir)
        coordinator = cluster.metrics_address("coordinator-c1")
        executor = cluster.metrics_address("executor-e1")
        cluster.cli("pipeline", "create", "-f", str(spec))

        # The first pre-commit is held: nothing is COMPLETE, so the whole input is lag.
        wait_for("the first pre-commit to hold", lambda: held(hold_dir, HOLD), timeout_s=240)
        wait_for(
            "the lag gauge to show the whole input",
            lambda: _value(coordinator, "lockgate_source_lag", pipeline=name) == RECORDS,
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        assert cluster.pipeline_status(name).total_source_lag == RECORDS
        wait_for(
            "the timed-out checkpoint counted as aborted, reason timeout",
            lambda: (
                (
                    _value(
                        coordinator,
                        "lockgate_checkpoints_total",
                        pipeline=name,
                        state="aborted",
                        abort_reason="timeout",
                    )
                    or 0
                )
                >= 1
            ),
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        release(hold_dir, HOLD)

        # The input stopped: once it is committed the counter equals the sink, lag is 0.
        wait_for(
            f"the records-written counter to reach {RECORDS}",
            lambda: (
                _value(executor, "lockgate_task_records_written_total", pipeline=name) == RECORDS
            ),
            timeout_s=240,
            explain=cluster.logs_tail,
        )
        output = read_output(bootstrap, sink)
        assert len(output) == RECORDS
        # Bytes: what the sink holds (keys and values) and what the source held, the same
        # here (a bytes copy), counted on commit like the records.
        sink_bytes = sum(len(r.key or b"") + len(r.value or b"") for r in output)
        source_bytes = sum(len(key) + len(value) for key, value, _ in produced)
        assert sink_bytes == source_bytes
        wait_for(
            "the bytes counters to match the sink",
            lambda: (
                (
                    _value(executor, "lockgate_task_written_size_bytes_total", pipeline=name),
                    _value(executor, "lockgate_task_read_size_bytes_total", pipeline=name),
                )
                == (sink_bytes, source_bytes)
            ),
            timeout_s=30,
            explain=cluster.logs_tail,
        )
        wait_for(
            "the lag gauge to fall to 0",
            lambda: _value(coordinator, "lockgate_source_lag", pipeline=name) == 0,
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        status = cluster.pipeline_status(name)
        assert status.total_source_lag == 0 and status.source_lag_complete
        assert sorted((p.partition, p.lag) for p in status.source_lags) == [(0, 0), (1, 0)]
        assert status.records_per_second > 0
        assert status.HasField("last_commit_age")
        shown = cluster.cli("pipeline", "status", name).stdout
        assert "lag 0 records" in shown and "records/s" in shown

        leader = scrape(coordinator)
        assert (series_value(leader, "lockgate_checkpoints_total", state="committed") or 0) >= 1
        for phase in ("trigger_to_complete", "complete_to_committed"):
            count = series_value(
                leader, "lockgate_checkpoint_duration_seconds_count", pipeline=name, phase=phase
            )
            assert count is not None and count >= 1, phase
        assert series_value(leader, "lockgate_tasks", pipeline=name, state="running") == 1
        assert series_value(leader, "lockgate_executor_sessions", state="alive") == 1
        assert (series_value(leader, "lockgate_leader_failovers_total") or 0) >= 1
        assert (
            series_value(
                leader,
                "rpc_server_duration_seconds_count",
                rpc_method="ReportPrecommits",
                rpc_grpc_status_code="0",
            )
            or 0
        ) >= 1
        worker = scrape(executor)
        assert (
            series_value(worker, "lockgate_visibility_latency_seconds_count", pipeline=name) or 0
        ) >= 1
        assert (
            series_value(worker, "rpc_server_duration_seconds_count", rpc_method="CommitCheckpoint")
            or 0
        ) >= 1
    finally:
        release(hold_dir, HOLD)
        cluster.stop_all()
