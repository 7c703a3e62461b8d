"""SchemaRegistryService over gRPC against a registry process."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from lockgate.v1 import schema_registry_pb2 as pb
from lockgate.v1 import schema_registry_pb2_grpc as pb_grpc
from tests.support.processes import RegistryProcess

V1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": "string", "default": ""},
        ],
    }
)
V3_BAD = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": "int"}],
    }
)


@pytest.fixture
def stub(sqlite_registry: RegistryProcess) -> Iterator[pb_grpc.SchemaRegistryServiceStub]:
    """A stub on the registry's gRPC port."""
    with grpc.insecure_channel(sqlite_registry.grpc_address) as channel:
        yield pb_grpc.SchemaRegistryServiceStub(channel)


def details(error: grpc.RpcError) -> dict[str, object]:
    """The google.rpc details of a failed call, by type."""
    status = rpc_status.from_call(error)
    assert status is not None, "the error carries no google.rpc.Status"
    found: dict[str, object] = {}
    for detail in status.details:
        for kind in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.PreconditionFailure,
        ):
            if detail.Is(kind.DESCRIPTOR):
                message = kind()
                detail.Unpack(message)
                found[kind.DESCRIPTOR.name] = message
    return found


def test_register_get_list_check(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    first = stub.RegisterSchema(
        pb.RegisterSchemaRequest(request_id=str(uuid.uuid4()), subject="orders-value", schema=V1)
    )
    assert first.created and first.version == 1
    again = stub.RegisterSchema(pb.RegisterSchemaRequest(subject="orders-value", schema=V1))
    assert not again.created and again.schema_id == first.schema_id
    second = stub.RegisterSchema(pb.RegisterSchemaRequest(subject="orders-value", schema=V2))
    assert second.version == 2

    got = stub.GetSchema(pb.GetSchemaRequest(schema_id=first.schema_id)).schema
    assert json.loads(got.schema) == json.loads(V1) and got.schema_type == pb.SCHEMA_TYPE_AVRO
    latest = stub.GetSubjectVersion(
        pb.GetSubjectVersionRequest(subject="orders-value")
    ).subject_version
    assert (latest.version, latest.schema_id) == (2, second.schema_id)
    found = stub.LookupSchema(
        pb.LookupSchemaRequest(subject="orders-value", schema=V2)
    ).subject_version
    assert found.version == 2

    for index in range(5):
        stub.RegisterSchema(pb.RegisterSchemaRequest(subject=f"page-{index}", schema=V1))
    page1 = stub.ListSubjects(pb.ListSubjectsRequest(page_size=4))
    page2 = stub.ListSubjects(pb.ListSubjectsRequest(page_size=4, page_token=page1.next_page_token))
    assert page2.next_page_token == ""
    assert list(page1.subjects) + list(page2.subjects) == ["orders-value"] + [
        f"page-{i}" for i in range(5)
    ]
    versions = stub.ListSubjectVersions(
        pb.ListSubjectVersionsRequest(subject="orders-value")
    ).versions
    assert [v.version for v in versions] == [1, 2]
    usages = stub.ListSchemaVersions(
        pb.ListSchemaVersionsRequest(schema_id=first.schema_id)
    ).versions
    assert len(usages) == 6

    ok = stub.CheckCompatibility(pb.CheckCompatibilityRequest(subject="orders-value", schema=V2))
    assert ok.compatible and ok.level == pb.COMPATIBILITY_LEVEL_BACKWARD
    bad = stub.CheckCompatibility(
        pb.CheckCompatibilityRequest(subject="orders-value", schema=V3_BAD)
    )
    assert not bad.compatible
    assert bad.reasons[0].startswith("READER_FIELD_MISSING_DEFAULT_VALUE at /Order/qty")


def test_incompatible_registration_status(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    stub.RegisterSchema(pb.RegisterSchemaRequest(subject="s", schema=V1))
    with pytest.raises(grpc.RpcError) as caught:
        stub.RegisterSchema(pb.RegisterSchemaRequest(subject="s", schema=V3_BAD))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    found = details(caught.value)
    assert found["ErrorInfo"].metadata["confluent_error_code"] == "409"  # type: ignore[attr-defined]
    violations = found["PreconditionFailure"].violations  # type: ignore[attr-defined]
    assert "/Order/qty" in violations[0].description


def test_invalid_arguments_name_the_field(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.RegisterSchema(pb.RegisterSchemaRequest(subject="s", schema="{nope"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = details(caught.value)
    assert found["BadRequest"].field_violations[0].field == "schema"  # type: ignore[attr-defined]
    assert found["ErrorInfo"].metadata["confluent_error_code"] == "42201"  # type: ignore[attr-defined]

    with pytest.raises(grpc.RpcError) as no_level:
        stub.UpdateCompatibilityConfig(pb.UpdateCompatibilityConfigRequest(subject="s"))
    assert no_level.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    with pytest.raises(grpc.RpcError) as bad_token:
        stub.ListSubjects(pb.ListSubjectsRequest(page_token="%%%"))
    assert bad_token.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    with pytest.raises(grpc.RpcError) as missing:
        stub.GetSchema(pb.GetSchemaRequest(schema_id=999))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert details(missing.value)["ErrorInfo"].metadata["confluent_error_code"] == "40403"  # type: ignore[attr-defined]


def test_config_and_deletes_with_request_ids(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    stub.RegisterSchema(pb.RegisterSchemaRequest(subject="s", schema=V1))
    updated = stub.UpdateCompatibilityConfig(
        pb.UpdateCompatibilityConfigRequest(
            request_id="r1", subject="s", level=pb.COMPATIBILITY_LEVEL_FULL
        )
    )
    assert updated.level == pb.COMPATIBILITY_LEVEL_FULL
    got = stub.GetCompatibilityConfig(pb.GetCompatibilityConfigRequest(subject="s"))
    assert got.level == pb.COMPATIBILITY_LEVEL_FULL
    with pytest.raises(grpc.RpcError) as unset:
        stub.GetCompatibilityConfig(pb.GetCompatibilityConfigRequest(subject="other"))
    assert unset.value.code() == grpc.StatusCode.NOT_FOUND
    fallback = stub.GetCompatibilityConfig(
        pb.GetCompatibilityConfigRequest(subject="other", default_to_global=True)
    )
    assert fallback.level == pb.COMPATIBILITY_LEVEL_BACKWARD

    deleted = stub.DeleteSubject(pb.DeleteSubjectRequest(request_id="d1", subject="s"))
    assert list(deleted.versions) == [1]
    # A retry with the same request_id gets the first answer, not 40404.
    retried = stub.DeleteSubject(pb.DeleteSubjectRequest(request_id="d1", subject="s"))
    assert list(retried.versions) == [1]
    with pytest.raises(grpc.RpcError) as twice:
        stub.DeleteSubject(pb.DeleteSubjectRequest(request_id="d2", subject="s"))
    assert twice.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    permanent = stub.DeleteSubject(pb.DeleteSubjectRequest(subject="s", permanent=True))
    assert list(permanent.versions) == [1]


@pytest.mark.parametrize("token", ["²", "bzotNQ==", "o:1", "x" * 300])
def test_a_page_token_the_registry_never_issued_is_invalid_on_every_list(
    stub: pb_grpc.SchemaRegistryServiceStub, token: str
) -> None:
    # "²" is a digit to str.isdigit() but not to int(); "bzotNQ==" is base64 of "o:-5".
    registered = stub.RegisterSchema(pb.RegisterSchemaRequest(subject="paged", schema=V1))
    calls = {
        "ListSubjects": lambda: stub.ListSubjects(pb.ListSubjectsRequest(page_token=token)),
        "ListSubjectVersions": lambda: stub.ListSubjectVersions(
            pb.ListSubjectVersionsRequest(subject="paged", page_token=token)
        ),
        "ListSchemaVersions": lambda: stub.ListSchemaVersions(
            pb.ListSchemaVersionsRequest(schema_id=registered.schema_id, page_token=token)
        ),
    }
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        violation = details(refused.value)["BadRequest"].field_violations[0]  # type: ignore[attr-defined]
        assert violation.field == "page_token", name


def test_schema_references(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    address = json.dumps(
        {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    )
    customer = json.dumps(
        {"type": "record", "name": "Customer", "fields": [{"name": "home", "type": "Address"}]}
    )
    stub.RegisterSchema(pb.RegisterSchemaRequest(subject="address", schema=address))
    latest = pb.SchemaReference(name="Address", subject="address", version=-1)
    registered = stub.RegisterSchema(
        pb.RegisterSchemaRequest(subject="customer", schema=customer, references=[latest])
    )
    pinned = pb.SchemaReference(name="Address", subject="address", version=1)
    got = stub.GetSchema(pb.GetSchemaRequest(schema_id=registered.schema_id)).schema
    assert list(got.references) == [pinned]
    version = stub.GetSubjectVersion(pb.GetSubjectVersionRequest(subject="customer"))
    assert list(version.subject_version.references) == [pinned]
    checked = stub.CheckCompatibility(
        pb.CheckCompatibilityRequest(subject="customer", schema=customer, references=[pinned])
    )
    assert checked.compatible
    referencing = stub.ListReferencingSchemas(
        pb.ListReferencingSchemasRequest(subject="address", version=1)
    )
    assert list(referencing.schema_ids) == [registered.schema_id]

    with pytest.raises(grpc.RpcError) as refused:
        stub.DeleteSubjectVersion(pb.DeleteSubjectVersionRequest(subject="address", version=1))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = details(refused.value)["ErrorInfo"]
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert info.metadata["confluent_error_code"] == "42206"

    missing = pb.SchemaReference(name="Address", subject="nowhere", version=1)
    with pytest.raises(grpc.RpcError) as invalid:
        stub.RegisterSchema(
            pb.RegisterSchemaRequest(subject="other", schema=customer, references=[missing])
        )
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad_request = details(invalid.value)["BadRequest"]
    assert isinstance(bad_request, error_details_pb2.BadRequest)
    assert bad_request.field_violations[0].field == "references"


def test_json_schema_type(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    person = {"type": "object", "properties": {"name": {"type": "string"}}}
    registered = stub.RegisterSchema(
        pb.RegisterSchemaRequest(
            subject="people", schema=json.dumps(person), schema_type=pb.SCHEMA_TYPE_JSON
        )
    )
    got = stub.GetSchema(pb.GetSchemaRequest(schema_id=registered.schema_id)).schema
    assert got.schema_type == pb.SCHEMA_TYPE_JSON
    assert json.loads(got.schema) == person
    looked_up = stub.LookupSchema(
        pb.LookupSchemaRequest(
            subject="people",
            schema=json.dumps(person, indent=2),
            schema_type=pb.SCHEMA_TYPE_JSON,
        )
    )
    assert looked_up.subject_version.schema_id == registered.schema_id
    assert looked_up.subject_version.schema_type == pb.SCHEMA_TYPE_JSON


def test_protobuf_schema_type(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    text = 'syntax = "proto3";\nmessage Pay { string card = 1; }'
    registered = stub.RegisterSchema(
        pb.RegisterSchemaRequest(subject="pay", schema=text, schema_type=pb.SCHEMA_TYPE_PROTOBUF)
    )
    got = stub.GetSchema(pb.GetSchemaRequest(schema_id=registered.schema_id)).schema
    assert got.schema_type == pb.SCHEMA_TYPE_PROTOBUF
    assert got.schema == 'syntax = "proto3";\nmessage Pay {\n  string card = 1;\n}\n'
    looked_up = stub.LookupSchema(
        pb.LookupSchemaRequest(
            subject="pay",
            schema="// same\nsyntax='proto3'; message Pay {string card=1;}",
            schema_type=pb.SCHEMA_TYPE_PROTOBUF,
        )
    )
    assert looked_up.subject_version.schema_id == registered.schema_id
    with pytest.raises(grpc.RpcError) as invalid:
        stub.RegisterSchema(
            pb.RegisterSchemaRequest(
                subject="pay", schema="message {", schema_type=pb.SCHEMA_TYPE_PROTOBUF
            )
        )
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not compile: line 1" in (invalid.value.details() or "")


def test_modes_and_deleted_only_listings(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    assert stub.GetMode(pb.GetModeRequest()).mode == pb.MODE_READWRITE
    stub.UpdateMode(pb.UpdateModeRequest(subject="imported", mode=pb.MODE_IMPORT))
    imported = stub.RegisterSchema(
        pb.RegisterSchemaRequest(subject="imported", schema=V1, schema_id=500, version=9)
    )
    assert (imported.schema_id, imported.version) == (500, 9)
    with pytest.raises(grpc.RpcError) as outside_import:
        stub.RegisterSchema(pb.RegisterSchemaRequest(subject="plain", schema=V1, schema_id=3))
    assert outside_import.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = details(outside_import.value)["ErrorInfo"]
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert info.metadata["confluent_error_code"] == "42205"
    previous = stub.DeleteMode(pb.DeleteModeRequest(subject="imported"))
    assert previous.previous_mode == pb.MODE_IMPORT
    with pytest.raises(grpc.RpcError) as no_mode:
        stub.GetMode(pb.GetModeRequest(subject="imported"))
    assert no_mode.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as unspecified:
        stub.UpdateMode(pb.UpdateModeRequest(mode=pb.MODE_UNSPECIFIED))
    assert unspecified.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    stub.RegisterSchema(pb.RegisterSchemaRequest(subject="gone", schema=V1))
    stub.DeleteSubject(pb.DeleteSubjectRequest(subject="gone"))
    only = stub.ListSubjects(pb.ListSubjectsRequest(deleted_only=True))
    assert list(only.subjects) == ["gone"]
    versions = stub.ListSubjectVersions(
        pb.ListSubjectVersionsRequest(subject="gone", deleted_only=True)
    )
    assert [v.version for v in versions.versions] == [1]


def test_list_schemas_by_prefix(stub: pb_grpc.SchemaRegistryServiceStub) -> None:
    for subject in ("shop-orders", "shop-users", "other"):
        stub.RegisterSchema(pb.RegisterSchemaRequest(subject=subject, schema=V1))
    stub.RegisterSchema(pb.RegisterSchemaRequest(subject="shop-orders", schema=V2))
    listed = stub.ListSchemas(pb.ListSchemasRequest(subject_prefix="shop-", latest_only=True))
    assert [(v.subject, v.version) for v in listed.versions] == [
        ("shop-orders", 2),
        ("shop-users", 1),
    ]
    names = stub.ListSubjects(pb.ListSubjectsRequest(subject_prefix="shop-"))
    assert list(names.subjects) == ["shop-orders", "shop-users"]
