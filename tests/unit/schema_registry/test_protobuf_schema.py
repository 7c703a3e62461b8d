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


def test_the_stored_text_is_canonical_proto_whatever_form_was_sent() -> None:
    money = parse_protobuf_schema(MONEY, max_bytes=1 << 20)
    referenced = [("money.proto", money.normalized_text)]
    order = parse_protobuf_schema(ORDER, max_bytes=1 << 20, referenced=referenced)
    rewritten = parse_protobuf_schema(ORDER_REWRITTEN, max_bytes=1 << 20, referenced=referenced)
    sent_as_descriptor = parse_protobuf_schema(
        order.model.serialized(), max_bytes=1 << 20, referenced=referenced
    )
    assert order.normalized_text == rewritten.normalized_text
    assert sent_as_descriptor.normalized_text == order.normalized_text
    assert "//" not in order.normalized_text and "/*" not in order.normalized_text
    assert order.normalized_text.splitlines()[:4] == [
        'syntax = "proto3";',
        "package acme;",
        'import "money.proto";',
        'import "google/protobuf/timestamp.proto";',
    ]
    assert "  map<string, string> labels = 4;" in order.normalized_text
    assert "  oneof payment {" in order.normalized_text


def test_a_schema_the_writer_cannot_write_faithfully_is_kept_as_sent() -> None:
    # A proto2 group has no canonical writer here: the text is stored as it came.
    text = 'syntax = "proto2";\nmessage A {\n  optional group G = 1 { optional int32 x = 2; }\n}'
    assert parse_protobuf_schema(text, max_bytes=1 << 20).normalized_text == text


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


RICH_PROTO2 = """syntax = "proto2";
package x.y;
option java_package = "com.x";
option optimize_for = SPEED;
message A {
  message Inner { optional int32 q = 1; }
  optional string s = 1 [default = "hi", deprecated = true];
  map<string, Inner> m = 2;
  required int64 r = 3 [json_name = "rr"];
  repeated int32 p = 4 [packed = true];
  oneof o { string a = 5; int32 b = 6; }
  extensions 100 to max;
  reserved 10 to 12, 20;
  reserved "old";
  enum E { option allow_alias = true; E0 = 0; E1 = 1; E1B = 1 [deprecated = true]; }
  optional E e = 7 [default = E1];
}
extend A { optional int32 ext = 100; }
service S { rpc M (A) returns (stream A); }
"""


def test_the_canonical_writer_covers_proto2_options_maps_oneofs_extensions_services() -> None:
    parsed = parse_protobuf_schema(RICH_PROTO2, max_bytes=1 << 20)
    text = parsed.normalized_text
    # Written by the canonical writer (not kept as sent), and meaning the same schema.
    assert text != RICH_PROTO2.strip()
    for line in (
        '  optional string s = 1 [default = "hi", deprecated = true];',
        "  map<string, .x.y.A.Inner> m = 2;",
        '  required int64 r = 3 [json_name = "rr"];',
        "  extensions 100 to max;",
        "  reserved 10 to 12, 20;",
        "extend .x.y.A {",
        "  rpc M (.x.y.A) returns (stream .x.y.A);",
    ):
        assert line in text.splitlines(), line
    assert parse_protobuf_schema(text, max_bytes=1 << 20).fingerprint == parsed.fingerprint
