"""Hostile input against a coordinator process: refused at once with INVALID_ARGUMENT naming
the field and the limit, and the replica keeps answering (no broker needed: nothing here
may get as far as Kafka)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from lockgate.common.grpc_client import error_details, open_channel
from lockgate.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    pipeline_spec,
    rpc_error,
    unique_name,
)


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[coordinator_pb2_grpc.CoordinatorServiceStub]:
    """A stub of one coordinator replica on a SQLite file, once it leads."""
    running = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        (member,) = running.start(1)
        running.leader()
        with open_channel(member.address) as channel:
            yield coordinator_pb2_grpc.CoordinatorServiceStub(channel)
    finally:
        running.stop_all()


def violations(err: grpc.RpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_details(err).field_violations}


@pytest.mark.serial  # a time bound is the assertion
def test_a_spec_with_200000_topics_is_refused_in_well_under_a_second(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
) -> None:
    spec = pipeline_spec(
        unique_name("wide"), bootstrap="127.0.0.1:9", source_topic="t0", sink_topic="out"
    )
    spec.source.kafka.topics.extend(f"topic-{i}" for i in range(1, 200_000))
    calls = {
        "CreatePipeline": lambda: stub.CreatePipeline(
            coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15
        ),
        "ValidatePipeline": lambda: stub.ValidatePipeline(
            coordinator_pb2.ValidatePipelineRequest(spec=spec), timeout=15
        ),
    }
    for call in calls.values():
        started = time.monotonic()
        err = rpc_error(call)
        elapsed = time.monotonic() - started
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
        assert violations(err) == {
            "spec.source.kafka.topics": "has 200000 items, more than the limit of 1000"
        }
        assert elapsed < 1.0, f"took {elapsed:.2f} s"
    # The replica is unharmed: it answers at once, and still leads.
    started = time.monotonic()
    info = stub.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=5)
    assert time.monotonic() - started < 1.0
    assert info.leader_epoch.epoch >= 1


@pytest.mark.parametrize("servers", ["127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1"])
def test_a_bootstrap_port_outside_1_to_65535_is_invalid_argument_naming_the_field(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, servers: str
) -> None:
    spec = pipeline_spec(
        unique_name("port"), bootstrap="127.0.0.1:9092", source_topic="in", sink_topic="out"
    )
    spec.source.kafka.bootstrap_servers = servers
    err = rpc_error(
        lambda: stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15)
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    found = violations(err)
    assert list(found) == ["source.kafka.bootstrap_servers"]
    assert "1-65535" in found["source.kafka.bootstrap_servers"]


def test_kafka_properties_with_a_clear_secret_or_an_owned_key_are_refused_by_field(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
) -> None:
    secret = "hunter2-in-clear"
    spec = pipeline_spec(
        unique_name("props"), bootstrap="127.0.0.1:9092", source_topic="in", sink_topic="out"
    )
    spec.sink.kafka.properties["sasl.password"] = secret
    spec.source.kafka.properties["isolation.level"] = "read_uncommitted"
    err = rpc_error(
        lambda: stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15)
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    found = violations(err)
    assert set(found) == {
        "sink.kafka.properties['sasl.password']",
        "source.kafka.properties['isolation.level']",
    }
    assert "${file:" in found["sink.kafka.properties['sasl.password']"]
    assert "read_committed" in found["source.kafka.properties['isolation.level']"]
    assert secret not in (err.details() or "") + repr(found)


def test_a_pipeline_name_over_its_limit_is_refused_by_path_and_limit(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
) -> None:
    err = rpc_error(
        lambda: stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name="p" * 100_000), timeout=5)
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violations(err) == {"name": "has 100000 characters, more than the limit of 4096"}


@pytest.mark.parametrize("token", ["²", "-1", "x" * 300])
def test_a_page_token_the_server_never_issued_is_invalid_argument_on_every_list(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, token: str
) -> None:
    calls = {
        "ListPipelines": lambda: stub.ListPipelines(
            coordinator_pb2.ListPipelinesRequest(page_token=token), timeout=5
        ),
        "ListTasks": lambda: stub.ListTasks(
            coordinator_pb2.ListTasksRequest(page_token=token), timeout=5
        ),
        "ListCheckpoints": lambda: stub.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(pipeline_name="any", page_token=token),
            timeout=5,
        ),
    }
    for name, call in calls.items():
        err = rpc_error(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, err.details())
        assert list(violations(err)) == ["page_token"], name


def test_the_page_tokens_the_server_issues_still_page(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
) -> None:
    # Pipelines cannot be created without a broker, so page the (empty) task list and
    # check the numeric token form is read, not refused.
    answer = stub.ListTasks(coordinator_pb2.ListTasksRequest(page_token="100"), timeout=5)
    assert list(answer.tasks) == []
    assert (
        stub.ListPipelines(
            coordinator_pb2.ListPipelinesRequest(page_token="orders"), timeout=5
        ).pipelines
        == []
    )
