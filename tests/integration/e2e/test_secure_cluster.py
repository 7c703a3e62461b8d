"""A secure cluster (issue 8): coordinator and executor with TLS, tokens and mTLS, made by
``lockgate.localcluster.certs`` as ``make cluster-up`` makes them. A copy pipeline runs while
strangers call: no credentials (UNAUTHENTICATED), a viewer deleting (PERMISSION_DENIED), an
executor registering and reporting for another executor id (PERMISSION_DENIED), control calls
to the executor from a non-coordinator identity, one with a forged epoch (PERMISSION_DENIED),
plaintext and certificate-less clients (refused at the handshake). The last test checks the
pipeline's output equals its input."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from lockgate.common.grpc_client import open_channel
from lockgate.common.security import ClientSecurity
from lockgate.localcluster.certs import LocalPki, add_principal, ensure_local_pki, issue_client_cert
from lockgate.localcluster.kafka import create_topic
from lockgate.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
)
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    ServiceCluster,
    check_output,
    pipeline_yaml,
    produce_keyed,
    read_output,
    unique,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

RECORDS = 2_000
FORGED = common_pb2.LeaderEpoch(epoch=2**63 - 1, leader_id="stranger")


@dataclass(frozen=True)
class SecureRun:
    """The secure cluster, its identities, and the pipeline running through it."""

    cluster: ServiceCluster
    pki: LocalPki
    viewer_token: str
    pipeline: str
    sink_topic: str
    written: list[tuple[bytes, bytes, int]]

    @property
    def coordinator(self) -> str:
        """c1's address."""
        return self.cluster.coordinator_addresses[0]

    @property
    def executor(self) -> str:
        """e1's address."""
        return self.cluster.running["executor-e1"].address

    def token(self, path: Path) -> ClientSecurity:
        """TLS with the bearer token stored in ``path``."""
        return ClientSecurity(tls=True, ca=self.pki.ca, token=path.read_text().strip())

    def intruder(self, *, token: str | None) -> ClientSecurity:
        """A valid client certificate that is not the coordinator's (CN ``intruder``)."""
        cert, key = self.pki.client_cert("intruder")
        return ClientSecurity(
            tls=True, ca=self.pki.ca, client_cert=cert, client_key=key, token=token
        )


@pytest.fixture(scope="module")
def secure(
    kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureRun]:
    """c1 and e1 with TLS and authentication, and a copy pipeline of RECORDS records."""
    home = tmp_path_factory.mktemp("e2e-secure")
    pki = ensure_local_pki(home, ["e1", "e2"])
    viewer = add_principal(pki, principal="vera", roles=["viewer"], token_file=home / "v.token")
    issue_client_cert(pki, "intruder")
    cluster = ServiceCluster(
        home=home,
        bootstrap_servers=kafka_broker.bootstrap_servers,
        coordinator_args=("--heartbeat-interval-ms", "500"),
        pki=pki,
    )
    source, sink, name = unique("sec-in"), unique("sec-out"), unique("secure")
    try:
        cluster.start_coordinator("c1")
        cluster.start_executor("e1")
        create_topic(kafka_broker.bootstrap_servers, source, partitions=2)
        create_topic(kafka_broker.bootstrap_servers, sink, partitions=2)
        written = produce_keyed(
            kafka_broker.bootstrap_servers, source, records=RECORDS, partitions=2
        )
        spec = home / "pipeline.yaml"
        spec.write_text(
            pipeline_yaml(
                name=name,
                bootstrap_servers=kafka_broker.bootstrap_servers,
                source_topic=source,
                sink_topic=sink,
            )
        )
        cluster.cli("pipeline", "create", "-f", str(spec))
        yield SecureRun(cluster, pki, viewer, name, sink, written)
    finally:
        cluster.stop_all()


def _code(
    address: str, security: ClientSecurity | None, invoke: Callable[[grpc.Channel], Any]
) -> grpc.StatusCode:
    """The status code of ``invoke`` over a channel to ``address`` (OK if it answered)."""
    with open_channel(address, follow_leader=False, security=security) as channel:
        try:
            invoke(channel)
        except grpc.RpcError as err:
            return err.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _cluster_info(channel: grpc.Channel) -> Any:
    return coordinator_pb2_grpc.CoordinatorServiceStub(channel).GetClusterInfo(
        coordinator_pb2.GetClusterInfoRequest(), timeout=10
    )


def test_a_call_without_credentials_is_unauthenticated(secure: SecureRun) -> None:
    anonymous = ClientSecurity(tls=True, ca=secure.pki.ca)
    assert _code(secure.coordinator, anonymous, _cluster_info) == grpc.StatusCode.UNAUTHENTICATED
    wrong = ClientSecurity(tls=True, ca=secure.pki.ca, token="guessed")
    assert _code(secure.coordinator, wrong, _cluster_info) == grpc.StatusCode.UNAUTHENTICATED


def test_a_viewer_reads_but_may_not_delete_the_pipeline(secure: SecureRun) -> None:
    viewer = ClientSecurity(tls=True, ca=secure.pki.ca, token=secure.viewer_token)
    assert _code(secure.coordinator, viewer, _cluster_info) == grpc.StatusCode.OK
    delete = coordinator_pb2.DeletePipelineRequest(name=secure.pipeline)
    code = _code(
        secure.coordinator,
        viewer,
        lambda ch: coordinator_pb2_grpc.CoordinatorServiceStub(ch).DeletePipeline(
            delete, timeout=10
        ),
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_an_executor_may_not_register_or_report_for_another_executor(secure: SecureRun) -> None:
    e2 = secure.token(secure.pki.executor_token("e2"))
    register = coordinator_pb2.RegisterExecutorRequest(executor_id="e1", address="127.0.0.1:1")
    report = coordinator_pb2.ReportPrecommitRequest(executor_id="e1", checkpoint_id=1)
    for invoke in (
        lambda ch: coordinator_pb2_grpc.CoordinatorServiceStub(ch).RegisterExecutor(
            register, timeout=10
        ),
        lambda ch: coordinator_pb2_grpc.CoordinatorServiceStub(ch).ReportPrecommit(
            report, timeout=10
        ),
    ):
        assert _code(secure.coordinator, e2, invoke) == grpc.StatusCode.PERMISSION_DENIED


def test_control_calls_to_the_executor_need_the_coordinator_identity(secure: SecureRun) -> None:
    admin_token = secure.pki.admin_token.read_text().strip()
    status = executor_pb2.GetExecutorStatusRequest(leader_epoch=FORGED)
    trigger = executor_pb2.TriggerCheckpointRequest(
        leader_epoch=FORGED, executor_id="e1", pipeline_name=secure.pipeline, checkpoint_id=1
    )
    calls = [
        lambda ch: executor_pb2_grpc.ExecutorServiceStub(ch).GetExecutorStatus(status, timeout=10),
        lambda ch: executor_pb2_grpc.ExecutorServiceStub(ch).TriggerCheckpoint(trigger, timeout=10),
    ]
    for invoke in calls:
        # A certificate the CA signed, but not the coordinator's: who is it?
        unknown = secure.intruder(token=None)
        assert _code(secure.executor, unknown, invoke) == grpc.StatusCode.UNAUTHENTICATED
        # Even the admin may not send an executor an epoch.
        admin = secure.intruder(token=admin_token)
        assert _code(secure.executor, admin, invoke) == grpc.StatusCode.PERMISSION_DENIED


def test_clients_without_tls_or_without_a_client_certificate_are_refused(
    secure: SecureRun,
) -> None:
    status = executor_pb2.GetExecutorStatusRequest()
    plain = _code(secure.coordinator, ClientSecurity(token="x"), _cluster_info)
    assert plain == grpc.StatusCode.UNAVAILABLE
    no_cert = ClientSecurity(tls=True, ca=secure.pki.ca, token="x")
    code = _code(
        secure.executor,
        no_cert,
        lambda ch: executor_pb2_grpc.ExecutorServiceStub(ch).GetExecutorStatus(status, timeout=10),
    )
    assert code == grpc.StatusCode.UNAVAILABLE
    refused = secure.cluster.cli("--insecure", "pipeline", "list", check=False)
    assert refused.returncode == 1
    assert "TLS" in refused.stderr


def test_the_pipeline_copied_every_record_exactly_once(secure: SecureRun) -> None:
    bootstrap = secure.cluster.bootstrap_servers
    wait_for(
        f"{RECORDS} records committed",
        lambda: len(read_output(bootstrap, secure.sink_topic)) >= RECORDS,
        timeout_s=180,
        explain=secure.cluster.logs_tail,
    )
    result = check_output(secure.written, read_output(bootstrap, secure.sink_topic))
    assert (result.duplicates, result.missing) == (0, 0), (result, secure.cluster.logs_tail())
