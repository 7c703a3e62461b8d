"""The registry with TLS and ``--auth-tokens`` (a real process): HTTPS with Bearer and HTTP
Basic, Confluent-style 401/403 bodies, and gRPC refusing plaintext and unknown callers."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from lockgate.common.grpc_client import open_channel
from lockgate.common.security import ClientSecurity, read_token
from lockgate.localcluster.certs import LocalPki, add_principal, ensure_local_pki
from lockgate.schema_registry.serde import RestSchemaFetcher, SerdeError
from lockgate.v1 import schema_registry_pb2, schema_registry_pb2_grpc
from tests.support.processes import RegistryProcess, start_registry

_SCHEMA = json.dumps({"type": "record", "name": "U", "fields": [{"name": "a", "type": "int"}]})


@dataclass(frozen=True)
class SecureRegistry:
    """A TLS registry with admin, viewer and schema-writer tokens."""

    process: RegistryProcess
    pki: LocalPki
    viewer: str
    writer: str

    @property
    def url(self) -> str:
        """The HTTPS base URL."""
        return f"https://{self.process.http_address}"

    def client(self) -> httpx.Client:
        """An HTTPS client trusting the local CA, no credentials."""
        return httpx.Client(
            base_url=self.url, verify=ClientSecurity(tls=True, ca=self.pki.ca).ssl_context()
        )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRegistry]:
    home = tmp_path_factory.mktemp("secure-registry")
    pki = ensure_local_pki(home)
    viewer = add_principal(pki, principal="vera", roles=["viewer"], token_file=home / "v.token")
    writer = add_principal(
        pki, principal="wes", roles=["schema-writer"], token_file=home / "w.token"
    )
    process = start_registry(
        f"sqlite:///{home / 'registry.db'}", *pki.registry_args(), "--processes", "1"
    )
    try:
        yield SecureRegistry(process, pki, viewer, writer)
    finally:
        process.stop()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_rest_without_credentials_is_401_with_a_confluent_body(registry: SecureRegistry) -> None:
    with registry.client() as client:
        answer = client.get("/subjects")
    assert answer.status_code == 401
    assert answer.json()["error_code"] == 40101
    assert "Bearer" in answer.json()["message"]


def test_rest_accepts_bearer_and_basic(registry: SecureRegistry) -> None:
    admin = read_token(registry.pki.admin_token)
    with registry.client() as client:
        assert (
            client.get("/subjects", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
        )
        assert client.get("/subjects", headers=_basic("vera", registry.viewer)).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer not-a-token"},
        _basic("vera", "wrong"),
        _basic("someone-else", "x"),
        {"Authorization": "Negotiate abc"},
    ],
)
def test_rest_wrong_credentials_are_401(registry: SecureRegistry, headers: dict[str, str]) -> None:
    with registry.client() as client:
        answer = client.get("/subjects", headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error_code"] == 40101


def test_a_viewer_may_not_register_but_a_schema_writer_may(registry: SecureRegistry) -> None:
    body = {"schema": _SCHEMA}
    with registry.client() as client:
        refused = client.post(
            "/subjects/s1/versions", json=body, headers=_basic("vera", registry.viewer)
        )
        accepted = client.post(
            "/subjects/s1/versions",
            json=body,
            headers={"Authorization": f"Bearer {registry.writer}"},
        )
    assert refused.status_code == 403
    assert refused.json()["error_code"] == 40301
    assert "schema-writer" in refused.json()["message"]
    assert accepted.status_code == 200, accepted.text


def test_plain_http_against_the_https_port_gets_no_answer(registry: SecureRegistry) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{registry.process.http_address}/subjects", timeout=5)


def _grpc_code(
    registry: SecureRegistry, security: ClientSecurity | None, method: str, request: object
) -> grpc.StatusCode:
    """The status code of one gRPC call to the registry as ``security`` says."""
    address = registry.process.grpc_address
    with open_channel(address, follow_leader=False, security=security) as channel:
        stub = schema_registry_pb2_grpc.SchemaRegistryServiceStub(channel)
        try:
            getattr(stub, method)(request, timeout=5)
        except grpc.RpcError as err:
            return err.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_grpc_refuses_plaintext_and_unknown_callers(registry: SecureRegistry) -> None:
    listing = schema_registry_pb2.ListSubjectsRequest()
    assert _grpc_code(registry, None, "ListSubjects", listing) == grpc.StatusCode.UNAVAILABLE
    anonymous = ClientSecurity(tls=True, ca=registry.pki.ca)
    assert (
        _grpc_code(registry, anonymous, "ListSubjects", listing) == grpc.StatusCode.UNAUTHENTICATED
    )
    viewer = ClientSecurity(tls=True, ca=registry.pki.ca, token=registry.viewer)
    assert _grpc_code(registry, viewer, "ListSubjects", listing) == grpc.StatusCode.OK
    delete = schema_registry_pb2.DeleteSubjectRequest(subject="s1")
    assert (
        _grpc_code(registry, viewer, "DeleteSubject", delete) == grpc.StatusCode.PERMISSION_DENIED
    )


def test_registry_refuses_to_start_on_a_public_address_without_tls(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"refusing to serve 0\.0\.0\.0"):
        start_registry(f"sqlite:///{tmp_path / 'r.db'}", "--grpc", "0.0.0.0:0", "--processes", "1")


def test_executors_fetch_schemas_over_https_with_their_token(
    registry: SecureRegistry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with registry.client() as client:
        registered = client.post(
            "/subjects/fetched/versions",
            json={"schema": _SCHEMA},
            headers={"Authorization": f"Bearer {registry.writer}"},
        )
    schema_id = registered.json()["id"]
    fetcher = RestSchemaFetcher(registry.url)
    monkeypatch.setenv("LOCKGATE_SCHEMA_REGISTRY_CA", str(registry.pki.ca))
    with pytest.raises(SerdeError, match="answered 401"):
        fetcher(schema_id)
    token_file = tmp_path / "viewer.token"
    token_file.write_text(registry.viewer + "\n")
    monkeypatch.setenv("LOCKGATE_SCHEMA_REGISTRY_TOKEN_FILE", str(token_file))
    assert json.loads(fetcher(schema_id))["name"] == "U"
