"""A leader paused past its lease (SIGSTOP) and woken (SIGCONT), with a real executor.

Three coordinator replicas and one executor process (``--data-plane none``: the control
path only, its checkpoints read and write nothing) run a pipeline. The leader is SIGSTOPped;
a new one is elected and the executor learns its epoch from its heartbeats. A call carrying
the paused leader's epoch -- what it would send if it woke in the middle of one -- is
refused by the executor, which logs the refusal. After SIGCONT the old replica follows:
no checkpoint under its epoch was triggered after the pause, another replica leads, and
checkpoints commit under the new epoch.

The replicas share a PostgreSQL database, as in production: the SIGSTOP may land inside one
of the leader's write transactions (it writes every 200 ms here), and only a server can end
a paused session's transaction and release its locks (`idle_in_transaction_session_timeout`).
On SQLite the paused process keeps the file's write lock until it wakes, so no replica could
take the lease (README, Database timeouts); a CI run hit exactly that once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import grpc
import pytest
from grpc_status import rpc_status

from lockgate.localcluster.kafka import create_topic
from lockgate.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import ServiceCluster, pipeline_yaml, unique
from tests.support.waits import wait_for

pytestmark = [pytest.mark.postgres]

LEASE_MS = 2000


def _executor_status(address: str) -> executor_pb2.GetExecutorStatusResponse:
    with grpc.insecure_channel(address) as channel:
        answer: executor_pb2.GetExecutorStatusResponse = executor_pb2_grpc.ExecutorServiceStub(
            channel
        ).GetExecutorStatus(executor_pb2.GetExecutorStatusRequest(), timeout=5)
        return answer


def _committed(cluster: ServiceCluster, pipeline: str) -> int:
    try:
        return int(cluster.pipeline_status(pipeline).last_committed_checkpoint_id)
    except grpc.RpcError:  # a change of leader in progress: ask again
        return -1


def _committed_under(cluster: ServiceCluster, pipeline: str, epoch: int) -> bool:
    """Whether a checkpoint triggered under ``epoch`` or later has committed."""
    try:
        checkpoints = cluster.checkpoints(pipeline)
    except grpc.RpcError:  # a change of leader in progress: ask again
        return False
    return any(
        c.leader_epoch.epoch >= epoch and c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
        for c in checkpoints
    )


def test_paused_leader_writes_nothing_and_the_executor_refuses_its_epoch(
    kafka_broker: KafkaBroker, postgres_url: str, tmp_path: Path
) -> None:
    cluster = ServiceCluster(
        home=tmp_path / "services",
        bootstrap_servers=kafka_broker.bootstrap_servers,
        lease_ms=LEASE_MS,
        database_url=postgres_url,
        coordinator_args=("--heartbeat-interval-ms", "200"),
    )
    try:
        for coordinator_id in ("c1", "c2", "c3"):
            cluster.start_coordinator(coordinator_id)
        wait_for(
            "a leader", lambda: bool(cluster.leader_id()), timeout_s=30, explain=cluster.logs_tail
        )
        cluster.start_executor("e1", data_plane="none")
        executor_address = f"127.0.0.1:{cluster.executor_ports['e1']}"
        source, sink = unique("paused_in"), unique("paused_out")
        create_topic(kafka_broker.bootstrap_servers, source)
        create_topic(kafka_broker.bootstrap_servers, sink)
        pipeline = unique("paused")
        spec = tmp_path / "paused.yaml"
        spec.write_text(
            pipeline_yaml(
                name=pipeline,
                bootstrap_servers=kafka_broker.bootstrap_servers,
                source_topic=source,
                sink_topic=sink,
                interval_ms=200,
                tasks_max=1,
            )
        )
        cluster.cli("pipeline", "create", "-f", str(spec))
        wait_for(
            "a committed checkpoint before the pause",
            lambda: _committed(cluster, pipeline) > 0,
            timeout_s=60,
            explain=cluster.logs_tail,
        )

        info = cluster.cluster_info()
        old_id, old_epoch = info.leader_epoch.leader_id, info.leader_epoch.epoch
        old_pid = cluster.pid(f"coordinator-{old_id}")
        assert old_pid is not None
        before_pause = max(c.checkpoint_id for c in cluster.checkpoints(pipeline))
        paused_at_ms = int(time.time() * 1000)
        os.kill(old_pid, signal.SIGSTOP)
        try:
            wait_for(
                "the executor to learn a new leader's epoch",
                lambda: (
                    _executor_status(executor_address).highest_leader_epoch_seen.epoch > old_epoch
                ),
                timeout_s=30,
                explain=cluster.logs_tail,
            )
            status = _executor_status(executor_address)
            new_epoch = status.highest_leader_epoch_seen.epoch
            new_id = status.highest_leader_epoch_seen.leader_id
            assert new_id != old_id
            # What the paused leader would send if it woke in the middle of a call.
            with (
                grpc.insecure_channel(executor_address) as channel,
                pytest.raises(grpc.RpcError) as refused,
            ):
                executor_pb2_grpc.ExecutorServiceStub(channel).CommitCheckpoint(
                    executor_pb2.CommitCheckpointRequest(
                        request_id="paused-leader",
                        leader_epoch=common_pb2.LeaderEpoch(epoch=old_epoch, leader_id=old_id),
                        executor_id="e1",
                        executor_generation=status.executor_generation,
                        pipeline_name=pipeline,
                        checkpoint_id=before_pause,
                    ),
                    timeout=5,
                )
        finally:
            os.kill(old_pid, signal.SIGCONT)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = rpc_status.from_call(refused.value)
        assert details is not None
        failure = common_pb2.FencingFailure()
        assert any(d.Unpack(failure) for d in details.details)
        assert failure.token == common_pb2.FENCING_TOKEN_LEADER_EPOCH
        assert (failure.presented, failure.current) == (old_epoch, new_epoch)
        refusal = f"refused leader_epoch={old_epoch} highest_seen={new_epoch} rpc=CommitCheckpoint"
        assert refusal in cluster.log("executor-e1")

        # Woken, the old replica follows; checkpoints go on under the new epoch only.
        wait_for(
            "a checkpoint of the new epoch committed",
            lambda: _committed_under(cluster, pipeline, new_epoch),
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        info = cluster.cluster_info()
        assert info.leader_epoch.epoch >= new_epoch and info.leader_epoch.leader_id != old_id
        # The old leader may trigger one between `before_pause` and the SIGSTOP; the new
        # leader then aborts it, or commits it if every task had pre-committed it, under
        # the epoch that triggered it. Woken, the old replica triggers nothing more: every
        # checkpoint under its epoch was triggered before the pause, and precedes the new
        # epoch's first.
        checkpoints = cluster.checkpoints(pipeline)
        old = [c for c in checkpoints if c.leader_epoch.epoch < new_epoch]
        new = [c for c in checkpoints if c.leader_epoch.epoch >= new_epoch]
        assert new and old
        assert max(c.checkpoint_id for c in old) < min(c.checkpoint_id for c in new), [
            (c.checkpoint_id, c.leader_epoch.epoch) for c in checkpoints
        ]
        after_pause = [
            (c.checkpoint_id, c.leader_epoch.epoch, c.trigger_time.ToMilliseconds())
            for c in old
            if c.trigger_time.ToMilliseconds() > paused_at_ms
        ]
        assert not after_pause, (paused_at_ms, after_pause)
        later = [c for c in new if c.state != common_pb2.CHECKPOINT_STATE_ABORTED]
        print(
            f"\npaused leader {old_id} (epoch {old_epoch}); {new_id} led with epoch {new_epoch};"
            f" {len(later)} checkpoints since, none triggered by {old_id} after the pause"
        )
    finally:
        cluster.stop_all()
