"""A pipeline's Kafka is checked in one answer, against a coordinator process and a real
broker: every missing topic (sources, sink, dead-letter topic) at once, and a broker that
cannot be reached named by its field well within the CLI's call deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import typer
from google.protobuf import field_mask_pb2
from typer.testing import CliRunner

from lockgate.client.coordinator_cli import cluster_app, pipeline_app
from lockgate.common.grpc_client import error_details, open_channel
from lockgate.localcluster.ports import free_port
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    pipeline_spec,
    rpc_error,
    unique_name,
)

UNREACHABLE_BOUND_S = 5.0
"""The README's bound for naming a broker that does not answer (3 s metadata timeout,
plus the call)."""


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[str]:
    """One coordinator replica on a SQLite file; its address once it leads."""
    running = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        (member,) = running.start(1)
        running.leader()
        yield member.address
    finally:
        running.stop_all()


def cli() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(pipeline_app, name="pipeline")
    return app


def violations(err: grpc.RpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_details(err).field_violations}


def test_every_missing_topic_is_named_in_one_answer(
    coordinator: str, kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(), new_topic()
    spec = pipeline_spec(
        unique_name("missing"), bootstrap=bootstrap, source_topic=source, sink_topic=sink
    )
    spec.source.kafka.topics.extend(
        ["absent-a-" + unique_name("t"), "absent-b-" + unique_name("t")]
    )
    spec.errors.CopyFrom(
        common_pb2.ErrorsSpec(
            tolerance=common_pb2.ERROR_TOLERANCE_ALL, dead_letter_topic=unique_name("dlq")
        )
    )
    expected = ["source.kafka.topics[1]", "source.kafka.topics[2]", "errors.dead_letter_topic"]
    with open_channel(coordinator) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert list(violations(err)) == expected
        assert all("does not exist" in d for d in violations(err).values())
        assert error_details(err).reason == "TOPIC_NOT_FOUND"
        checked = stub.ValidatePipeline(
            coordinator_pb2.ValidatePipelineRequest(spec=spec), timeout=15
        )
        assert [v.field for v in checked.violations] == expected


@pytest.mark.serial  # a time bound is the assertion
def test_an_unreachable_broker_is_named_by_its_field_within_the_bound(
    coordinator: str, tmp_path: Path
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
    spec = pipeline_spec(
        unique_name("nowhere"), bootstrap=nowhere, source_topic="a", sink_topic="b"
    )
    with open_channel(coordinator) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        began = time.monotonic()
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15
            )
        )
        took = time.monotonic() - began
    print(f"\nunreachable broker answered in {took * 1000:.0f} ms")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert took < UNREACHABLE_BOUND_S
    found = violations(err)
    assert list(found) == ["source.kafka.bootstrap_servers", "sink.kafka.bootstrap_servers"]
    assert all(f"Kafka at {nowhere} could not be reached" in d for d in found.values())
    assert error_details(err).reason == "KAFKA_UNREACHABLE"

    # The CLI: exit 2 for the bad file, within the bound, each violation printed once.
    path = tmp_path / "nowhere.yaml"
    path.write_text(
        f"name: {unique_name('cli')}\n"
        f"source: {{kafka: {{bootstrap_servers: '{nowhere}', topics: [a]}}}}\n"
        f"sink: {{kafka: {{bootstrap_servers: '{nowhere}', topic: b}}}}\n"
    )
    began = time.monotonic()
    result = CliRunner().invoke(
        cli(), ["pipeline", "create", "-f", str(path), "--coordinator", coordinator]
    )
    took = time.monotonic() - began
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert took < UNREACHABLE_BOUND_S
    assert output.count(f"source.kafka.bootstrap_servers: Kafka at {nowhere}") == 1
    assert output.count(f"sink.kafka.bootstrap_servers: Kafka at {nowhere}") == 1


def test_create_on_a_taken_name_says_what_the_cli_can_do(
    coordinator: str, kafka_broker: KafkaBroker, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    name = unique_name("taken")
    bootstrap = kafka_broker.bootstrap_servers
    path = tmp_path / "taken.yaml"
    path.write_text(
        f"name: {name}\n"
        f"source: {{kafka: {{bootstrap_servers: '{bootstrap}', topics: [{new_topic()}]}}}}\n"
        f"sink: {{kafka: {{bootstrap_servers: '{bootstrap}', topic: {new_topic()}}}}}\n"
    )
    argv = ["pipeline", "create", "-f", str(path), "--coordinator", coordinator]
    assert CliRunner().invoke(cli(), argv).exit_code == 0
    again = CliRunner().invoke(cli(), argv)
    output = " ".join(again.output.split())
    assert again.exit_code == 1, output
    assert "ALREADY_EXISTS" in output
    assert f"lockgate pipeline delete {name}" in output
    assert "update that pipeline" not in output


def test_a_transaction_timeout_recovery_could_outlive_is_refused_at_create_and_update(
    coordinator: str, kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    name = unique_name("txn")
    spec = pipeline_spec(
        name, bootstrap=bootstrap, source_topic=new_topic(), sink_topic=new_topic()
    )
    spec.checkpoint.timeout_ms = 60_000
    both = {"checkpoint.timeout_ms", "sink.kafka.transaction_timeout_ms"}
    with open_channel(coordinator) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        spec.sink.kafka.transaction_timeout_ms = 61_000
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_details(err).reason == "TRANSACTION_TIMEOUT_TOO_SHORT"
        assert set(violations(err)) == both
        assert "raise sink.kafka.transaction_timeout_ms above" in (err.details() or "")

        spec.sink.kafka.transaction_timeout_ms = 0  # the default, 900000: fits
        stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15)
        update = coordinator_pb2.UpdatePipelineRequest(
            name=name,
            spec=common_pb2.PipelineSpec(
                sink=common_pb2.SinkSpec(
                    kafka=common_pb2.KafkaSinkSpec(
                        bootstrap_servers=bootstrap,
                        topic=spec.sink.kafka.topic,
                        transaction_timeout_ms=61_000,
                    )
                )
            ),
            update_mask=field_mask_pb2.FieldMask(paths=["sink"]),
        )
        err = rpc_error(lambda: stub.UpdatePipeline(update, timeout=15))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert set(violations(err)) == both
        got = stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=10)
        assert got.pipeline.spec.sink.kafka.transaction_timeout_ms == 900_000
