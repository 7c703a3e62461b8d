"""The one table of who may call what, and the token file behind it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from lockgate.common.access import METHOD_ACCESS, Role, access_of
from lockgate.common.auth import (
    Authenticator,
    Principal,
    append_token_entry,
    authorize,
    hash_token,
)
from lockgate.common.errors import PermissionDenied
from lockgate.common.security import SecurityConfigError
from lockgate.v1 import coordinator_pb2, executor_pb2, schema_registry_pb2


def _all_rpcs() -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for module in (coordinator_pb2, executor_pb2, schema_registry_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


def test_every_rpc_of_the_protos_has_an_access_row() -> None:
    # A new RPC without a row would be refused to everyone; a row without an RPC is a typo.
    assert _all_rpcs() - set(METHOD_ACCESS) == set()
    assert set(METHOD_ACCESS) - _all_rpcs() == set()


def test_executor_control_calls_are_for_the_coordinator_identity_only() -> None:
    for method in _all_rpcs():
        if method.startswith("/lockgate.v1.ExecutorService/"):
            assert METHOD_ACCESS[method].roles == {Role.COORDINATOR}, method


def test_viewer_reads_but_may_not_delete_a_pipeline() -> None:
    viewer = Principal("vera", frozenset({Role.VIEWER}))
    read = "/lockgate.v1.CoordinatorService/GetPipeline"
    authorize(access_of(read), viewer, executor_id=None, method=read)
    delete = "/lockgate.v1.CoordinatorService/DeletePipeline"
    with pytest.raises(PermissionDenied, match="admin, operator"):
        authorize(access_of(delete), viewer, executor_id=None, method=delete)


def test_an_executor_reports_only_for_its_own_id() -> None:
    e1 = Principal("e1", frozenset({Role.EXECUTOR}))
    method = "/lockgate.v1.CoordinatorService/ReportPrecommit"
    authorize(access_of(method), e1, executor_id="e1", method=method)
    with pytest.raises(PermissionDenied, match="only for its own executor id"):
        authorize(access_of(method), e1, executor_id="e2", method=method)


def test_a_method_missing_from_the_table_is_refused_even_to_admin() -> None:
    admin = Principal("root", frozenset({Role.ADMIN}))
    with pytest.raises(PermissionDenied, match="not open"):
        authorize(access_of("/x.Y/Z"), admin, executor_id=None, method="/x.Y/Z")


def test_token_file_keeps_hashes_and_authenticates_bearer_and_basic(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    token = append_token_entry(path, principal="alice", roles=["operator"])
    assert token not in path.read_text()
    assert hash_token(token) in path.read_text()
    assert path.stat().st_mode & 0o077 == 0
    authenticator = Authenticator.from_file(path)
    assert authenticator.from_authorization(f"Bearer {token}") == Principal(
        "alice", frozenset({Role.OPERATOR})
    )
    basic = base64.b64encode(f"alice:{token}".encode()).decode()
    assert authenticator.from_authorization(f"Basic {basic}") is not None
    wrong_user = base64.b64encode(f"bob:{token}".encode()).decode()
    assert authenticator.from_authorization(f"Basic {wrong_user}") is None
    assert authenticator.from_authorization("Bearer nope") is None
    assert authenticator.from_authorization("Basic !!!") is None


def test_certificate_cn_maps_to_its_principal(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("- {principal: coordinator, roles: [coordinator], certificate_cn: coord}\n")
    found = Authenticator.from_file(path).by_certificate(["coord"])
    assert found == Principal("coordinator", frozenset({Role.COORDINATOR}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- {principal: a, roles: [root], token_sha256: " + "0" * 64 + "}", "must each be one of"),
        ("- {principal: a, roles: [admin], token_sha256: secret}", "64 hex digits"),
        ("- {principal: a, roles: [admin]}", "token_sha256 or certificate_cn"),
        ("principal: a", "expected a list"),
    ],
)
def test_a_bad_token_file_is_refused_naming_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(SecurityConfigError, match=message):
        Authenticator.from_file(path)


def test_every_own_executor_method_names_the_executor_in_its_request() -> None:
    # The check compares the request's executor_id with the principal: a request without
    # the field would lock every executor out of the method.
    for module in (coordinator_pb2, executor_pb2, schema_registry_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                access = METHOD_ACCESS[f"/{service.full_name}/{method.name}"]
                if access.own_executor:
                    assert "executor_id" in method.input_type.fields_by_name, method.full_name
