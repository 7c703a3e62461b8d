"""request_id makes the coordinator's mutating calls idempotent, against real coordinator
processes: a retry after a lost answer (here: simply sent again, or sent to the next
leader after a SIGKILL) gets the first answer; the same id with another request is
INVALID_ARGUMENT naming `request_id`."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable

import grpc
from google.protobuf import field_mask_pb2

from lockgate.common.grpc_client import open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    pipeline_spec,
    rpc_error,
    unique_name,
    violations_of,
)
from tests.support.waits import wait_for


def test_retries_with_a_request_id_get_the_first_answer_even_from_the_next_leader(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """CreatePipeline retried: the pipeline, not ALREADY_EXISTS; UpdatePipeline with an
    expected config version retried: version 2 again, not ABORTED; both again from the new
    leader after the first one is SIGKILLed; DeletePipeline retried: success, not NOT_FOUND.
    The id reused for another spec or another RPC: INVALID_ARGUMENT on `request_id`, with
    nothing changed."""
    members = sqlite_cluster.start(2)
    leader = sqlite_cluster.leader()
    name = unique_name("rid")
    spec = pipeline_spec(
        name,
        bootstrap=kafka_broker.bootstrap_servers,
        source_topic=new_topic(partitions=2),
        sink_topic=new_topic(),
    )
    create = coordinator_pb2.CreatePipelineRequest(request_id=str(uuid.uuid4()), spec=spec)
    update = coordinator_pb2.UpdatePipelineRequest(
        request_id=str(uuid.uuid4()),
        name=name,
        spec=common_pb2.PipelineSpec(tasks_max=2),
        update_mask=field_mask_pb2.FieldMask(paths=["tasks_max"]),
        expected_config_version=1,
    )
    with open_channel([m.address for m in members]) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        created = stub.CreatePipeline(create, timeout=10)
        assert stub.CreatePipeline(create, timeout=10) == created
        updated = stub.UpdatePipeline(update, timeout=10)
        assert updated.pipeline.config_version == 2
        assert stub.UpdatePipeline(update, timeout=10) == updated

        other_spec = coordinator_pb2.CreatePipelineRequest()
        other_spec.CopyFrom(create)
        other_spec.spec.tasks_max = 3
        err = rpc_error(lambda: stub.CreatePipeline(other_spec, timeout=10))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        assert "different CreatePipeline request" in violations_of(err)["request_id"]
        pause = coordinator_pb2.PausePipelineRequest(request_id=create.request_id, name=name)
        err = rpc_error(lambda: stub.PausePipeline(pause, timeout=10))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        assert "already used for a CreatePipeline call" in violations_of(err)["request_id"]
        got = stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5)
        assert got.pipeline.target_state == common_pb2.TARGET_STATE_RUNNING
        assert got.pipeline.config_version == 2

        # The answers are in SQL: the next leader gives them again.
        old_epoch = leader.cluster_info().leader_epoch.epoch
        leader.process.send_signal(signal.SIGKILL)
        leader.process.wait(timeout=10)
        survivor = next(m for m in members if m is not leader)
        wait_for(
            "the survivor to lead",
            lambda: survivor.cluster_info().leader_epoch.epoch > old_epoch,
            timeout_s=10,
        )
        assert stub.CreatePipeline(create, timeout=15) == created
        assert stub.UpdatePipeline(update, timeout=15) == updated

        delete = coordinator_pb2.DeletePipelineRequest(request_id=str(uuid.uuid4()), name=name)
        stub.DeletePipeline(delete, timeout=10)
        stub.DeletePipeline(delete, timeout=10)
        err = rpc_error(
            lambda: stub.DeletePipeline(
                coordinator_pb2.DeletePipelineRequest(name=name), timeout=10
            )
        )
        assert err.code() == grpc.StatusCode.NOT_FOUND, "without an id the delete runs again"
