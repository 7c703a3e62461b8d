"""Protobuf in the registry: compiling, canonical ids, imports as references, formats."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import descriptor_pb2

from lockgate.schema_registry import errors
from lockgate.schema_registry.model import Subject, Version
from lockgate.schema_registry.protobuf_schema import parse_protobuf_schema
from lockgate.schema_registry.references import ReferenceRequest
from lockgate.schema_registry.registry import SchemaRegistry

MONEY = """
syntax = "proto3";
package acme.common;
message Money { int64 units = 1; string currency = 2; }
"""

ORDER = """
syntax = "proto3";
package acme;
import "money.proto";
import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  acme.common.Money total = 2;
  google.protobuf.Timestamp placed_at = 3;
  map<string, string> labels = 4;
  oneof payment { string card = 5; string iban = 6; }
}
"""

ORDER_REWRITTEN = """// The same schema, other whitespace and comments.
syntax="proto3";  package acme;
import "money.proto"; import "google/protobuf/timestamp.proto";
/* an order */ message Order{string id=1;acme.common.Money total=2;
google.protobuf.Timestamp placed_at=3; map<string,string> labels=4;
oneof payment{string card=5;string iban=6;}}
"""

MONEY_REFERENCE = ReferenceRequest("money.proto", Subject("money"), Version(1))


def register(registry: SchemaRegistry, subject: str, text: str, **kwargs: object) -> int:
    """Register a Protobuf schema; its id."""
    result = registry.register(subject, text, schema_type="PROTOBUF", **kwargs)  # type: ignore[arg-type]
    return int(result.schema_id)


def test_whitespace_comments_and_the_descriptor_form_do_not_change_the_id(
    registry: SchemaRegistry,
) -> None:
    register(registry, "money", MONEY)
    first = register(registry, "orders", ORDER, references=[MONEY_REFERENCE])
    again = registry.register(
        "orders", ORDER_REWRITTEN, schema_type="protobuf", references=[MONEY_REFERENCE]
    )
    assert (again.schema_id, again.created) == (first, False)
    # confluent-kafka's serializers send the schema as a base64 FileDescriptorProto.
    serialized = registry.serialized_text(registry.get_schema(first))
    as_descriptor = registry.lookup(
        "orders", serialized, schema_type="PROTOBUF", references=[MONEY_REFERENCE]
    )
    assert as_descriptor.schema_id == first
    stored = registry.get_schema(first)
    assert stored.schema_type == "PROTOBUF"
    assert stored.references[0].name == "money.proto"
    assert registry.referenced_by("money", 1) == [first]


def test_the_serialized_format_is_the_compiled_file_with_its_imports() -> None:
    money = parse_protobuf_schema(MONEY, max_bytes=1 << 20)
    order = parse_protobuf_schema(
        ORDER, max_bytes=1 << 20, referenced=[("money.proto", money.normalized_text)]
    )
    file = descriptor_pb2.FileDescriptorProto()
    file.ParseFromString(base64.b64decode(order.model.serialized()))
    assert file.package == "acme"
    assert list(file.dependency) == ["money.proto", "google/protobuf/timestamp.proto"]
    assert [m.name for m in file.message_type] == ["Order"]
    # The pool builds message classes: every import is there.
    pool = order.model.pool()
    assert pool.FindMessageTypeByName("acme.Order").fields_by_name["total"].message_type.name == (
        "Money"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('syntax = "proto3";\nmessage X { strin a = 1 }', "line 2 column"),
        ('syntax = "proto3";\nmessage X { Nope a = 1; }', '"Nope" is not defined'),
        ('syntax = "proto3";\nmessage X { int32 a = 1; int32 b = 1; }', "has already been used"),
        (
            'syntax = "proto3";\nimport "money.proto";\nmessage X { int32 a = 1; }',
            'imports "money.proto", which is not found',
        ),
        ("aGVsbG8gd29ybGQ=", "neither .proto text nor a base64 FileDescriptorProto"),
        ("   ", "empty"),
    ],
)
def test_an_invalid_schema_is_42201_with_protocs_reason(
    registry: SchemaRegistry, text: str, reason: str
) -> None:
    with pytest.raises(errors.InvalidSchemaError) as refused:
        register(registry, "things", text)
    assert refused.value.error_code == 42201
    assert reason in refused.value.message


def test_a_syntax_error_names_protocs_line_and_column(registry: SchemaRegistry) -> None:
    with pytest.raises(errors.InvalidSchemaError) as refused:
        register(registry, "things", 'syntax = "proto3";\nmessage X {\n  int32 a = 1\n}')
    assert 'line 4 column 1: Expected ";"' in refused.value.message


def test_well_known_imports_need_no_reference(registry: SchemaRegistry) -> None:
    text = (
        'syntax = "proto3";\nimport "google/protobuf/wrappers.proto";\n'
        "message X { google.protobuf.StringValue a = 1; }"
    )
    assert register(registry, "things", text) > 0


def test_a_reference_to_a_missing_version_is_42201(registry: SchemaRegistry) -> None:
    with pytest.raises(errors.InvalidSchemaError) as refused:
        register(registry, "orders", ORDER, references=[MONEY_REFERENCE])
    assert "no schema reference found for subject 'money'" in refused.value.message


def test_a_breaking_change_is_refused_with_the_field_path(registry: SchemaRegistry) -> None:
    register(registry, "money", MONEY)
    register(registry, "orders", ORDER, references=[MONEY_REFERENCE])
    broken = ORDER.replace("string id = 1;", "int64 id = 1;")
    with pytest.raises(errors.IncompatibleSchemaError) as refused:
        register(registry, "orders", broken, references=[MONEY_REFERENCE])
    assert any(
        "FIELD_SCALAR_KIND_CHANGED at #/Order/id=1" in reason for reason in refused.value.reasons
    ), refused.value.reasons
    # Adding a field is compatible (BACKWARD, the default level).
    added = ORDER.replace("string id = 1;", "string id = 1; string note = 7;")
    assert register(registry, "orders", added, references=[MONEY_REFERENCE])
