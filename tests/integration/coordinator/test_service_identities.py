"""A coordinator process with mTLS (``--tls-client-ca``) and ``--auth-tokens``: a client
certificate's CN or URI SAN names the principal; an unknown certificate is UNAUTHENTICATED,
no certificate fails the handshake, and a non-loopback listen without TLS refuses to start."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from lockgate.common.grpc_client import open_channel
from lockgate.common.security import ClientSecurity
from lockgate.localcluster.certs import LocalPki, ensure_local_pki, issue_client_cert
from lockgate.localcluster.commands import coordinator_command
from lockgate.localcluster.ports import free_port
from lockgate.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.support.processes import ChildProcess, start_child
from tests.support.waits import wait_for


@dataclass(frozen=True)
class MutualTls:
    """The coordinator process and the local CA its clients' certificates come from."""

    process: ChildProcess
    address: str
    pki: LocalPki

    def as_certificate(self, name: str) -> ClientSecurity:
        """TLS with the client certificate ``name`` (no token)."""
        cert, key = self.pki.client_cert(name)
        return ClientSecurity(tls=True, ca=self.pki.ca, client_cert=cert, client_key=key)

    def code(self, security: ClientSecurity) -> grpc.StatusCode:
        """The status of one GetClusterInfo as ``security`` says (OK if it answered)."""
        with open_channel(self.address, follow_leader=False, security=security) as channel:
            try:
                coordinator_pb2_grpc.CoordinatorServiceStub(channel).GetClusterInfo(
                    coordinator_pb2.GetClusterInfoRequest(), timeout=5
                )
            except grpc.RpcError as err:
                return err.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MutualTls]:
    home = tmp_path_factory.mktemp("mtls")
    pki = ensure_local_pki(home)
    issue_client_cert(pki, "by-cn")
    issue_client_cert(pki, "other-cn", uri="spiffe://lockgate/by-uri")
    issue_client_cert(pki, "stranger")
    with pki.tokens.open("a") as tokens:
        tokens.write("- {principal: cn-viewer, roles: [viewer], certificate_cn: by-cn}\n")
        tokens.write(
            "- {principal: uri-viewer, roles: [viewer], certificate_cn: 'spiffe://lockgate/by-uri'}\n"
        )
    address = f"127.0.0.1:{free_port()}"
    argv = coordinator_command(
        coordinator_id="c1",
        db_url=f"sqlite:///{home / 'coordinator.db'}",
        listen=address,
        extra=[
            *pki.coordinator_args(),
            *("--tls-client-ca", str(pki.ca)),
        ],
    )
    process = start_child("coordinator-c1", argv, log_path=home / "c1.log")
    running = MutualTls(process, address, pki)
    try:
        wait_for(
            "c1 answers the CN identity",
            lambda: running.code(running.as_certificate("by-cn")) == grpc.StatusCode.OK,
            timeout_s=60,
            abort_if=process.died,
        )
        yield running
    finally:
        process.stop()


def test_a_certificate_cn_or_uri_san_named_in_the_file_is_its_principal(mtls: MutualTls) -> None:
    assert mtls.code(mtls.as_certificate("by-cn")) == grpc.StatusCode.OK
    assert mtls.code(mtls.as_certificate("other-cn")) == grpc.StatusCode.OK


def test_a_certificate_the_file_does_not_name_is_unauthenticated(mtls: MutualTls) -> None:
    assert mtls.code(mtls.as_certificate("stranger")) == grpc.StatusCode.UNAUTHENTICATED


def test_without_a_client_certificate_the_handshake_fails(mtls: MutualTls) -> None:
    admin = ClientSecurity(tls=True, ca=mtls.pki.ca, token=mtls.pki.admin_token.read_text().strip())
    assert mtls.code(admin) == grpc.StatusCode.UNAVAILABLE


def test_a_public_listen_without_tls_refuses_to_start(tmp_path: Path) -> None:
    argv = coordinator_command(
        coordinator_id="c9",
        db_url=f"sqlite:///{tmp_path / 'c.db'}",
        listen=f"0.0.0.0:{free_port()}",
        advertise="127.0.0.1:1",
    )
    child = start_child("coordinator-c9", argv, log_path=tmp_path / "c9.log")
    assert child.wait_exit(timeout_s=60) == 2
    assert "refusing to serve 0.0.0.0 (not loopback) without TLS" in child.log_text()
    assert not (tmp_path / "c.db").exists()
