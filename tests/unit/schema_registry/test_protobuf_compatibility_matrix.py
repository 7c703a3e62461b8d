"""Protobuf compatibility matrix: each case's answer is Confluent's, cited.

Sources, by the tag each case carries:

- [SD]: the rule table of Confluent's checker, ``SchemaDiff.COMPATIBLE_CHANGES`` with the
  difference each change produces (``MessageSchemaDiff``, ``FieldSchemaDiff``,
  ``OneOfDiff``, ``EnumSchemaDiff``), in confluentinc/schema-registry
  ``protobuf-provider/src/main/java/io/confluent/kafka/schemaregistry/protobuf/diff/``;
  BACKWARD compares (previous, new), as ``ProtobufSchema.isBackwardCompatible`` calls
  ``SchemaDiff.compare(previous, this)``, and FORWARD the reverse.
- [DOC]: Confluent's "Protobuf compatibility rules",
  https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/serdes-protobuf.html
  (adding and removing fields is compatible both ways; changing a field's type within
  Protobuf's wire-compatible groups is compatible), and Protobuf's "Updating A Message Type"
  (https://protobuf.dev/programming-guides/proto3/#updating) for the scalar groups
  (int32/uint32/int64/uint64/bool; sint32/sint64; fixed32/sfixed32; fixed64/sfixed64;
  string/bytes) and "moving a single field into a new oneof is safe, several is not".
- [LG]: Lockgate's reserved-number rule (``protobuf_rules.RESERVED_NUMBER_REUSED``): not in
  Confluent's released table; Protobuf's guide says a reserved number must never be reused.
"""

from __future__ import annotations

import pytest

from lockgate.schema_registry.compatibility import check_compatibility
from lockgate.schema_registry.model import CompatibilityLevel
from lockgate.schema_registry.protobuf_compatibility import reader_writer_incompatibilities
from lockgate.schema_registry.protobuf_schema import ProtobufModel, parse_protobuf_schema


def model(
    body: str, *, syntax: str = "proto3", package: str = "acme", refs: tuple = ()
) -> ProtobufModel:  # type: ignore[type-arg]
    """A compiled schema: ``body`` after a syntax and package line."""
    text = f'syntax = "{syntax}";\npackage {package};\n{body}'
    return parse_protobuf_schema(text, max_bytes=1 << 20, referenced=refs).model


def msg(fields: str, name: str = "Order") -> str:
    return f"message {name} {{ {fields} }}"


BASE = msg("string id = 1; int32 qty = 2;")

#: (case, previous, new, BACKWARD accepts, FORWARD accepts, the change that decides, source)
CASES: list[tuple[str, str, str, bool, bool, str, str]] = [
    ("identical", BASE, BASE, True, True, "", "SD"),
    ("add a field", BASE, msg("string id = 1; int32 qty = 2; string note = 3;"),
     True, True, "", "DOC"),
    ("remove a field", BASE, msg("string id = 1;"), True, True, "", "DOC"),
    ("rename a field, same number", BASE, msg("string id = 1; int32 count = 2;"),
     True, True, "", "SD"),
    ("renumber a field (a removal and an addition)", BASE, msg("string id = 1; int32 qty = 3;"),
     True, True, "", "SD"),
    ("int32 -> int64", BASE, msg("string id = 1; int64 qty = 2;"), True, True, "", "DOC"),
    ("int32 -> uint64", BASE, msg("string id = 1; uint64 qty = 2;"), True, True, "", "DOC"),
    ("int32 -> bool", BASE, msg("string id = 1; bool qty = 2;"), True, True, "", "SD"),
    ("int32 -> sint32", BASE, msg("string id = 1; sint32 qty = 2;"),
     False, False, "FIELD_SCALAR_KIND_CHANGED at #/Order/qty=2", "DOC"),
    ("sint32 -> sint64", msg("sint32 a = 1;"), msg("sint64 a = 1;"), True, True, "", "DOC"),
    ("fixed32 -> sfixed32", msg("fixed32 a = 1;"), msg("sfixed32 a = 1;"), True, True, "", "DOC"),
    ("fixed64 -> sfixed64", msg("fixed64 a = 1;"), msg("sfixed64 a = 1;"), True, True, "", "DOC"),
    ("fixed32 -> fixed64", msg("fixed32 a = 1;"), msg("fixed64 a = 1;"),
     False, False, "FIELD_SCALAR_KIND_CHANGED", "SD"),
    ("float -> double", msg("float a = 1;"), msg("double a = 1;"),
     False, False, "FIELD_SCALAR_KIND_CHANGED", "SD"),
    ("string -> bytes", BASE, msg("bytes id = 1; int32 qty = 2;"), True, True, "", "DOC"),
    ("string -> int32", BASE, msg("int32 id = 1; int32 qty = 2;"),
     False, False, "FIELD_SCALAR_KIND_CHANGED at #/Order/id=1", "SD"),
    ("int32 -> enum", BASE, "enum Qty { Q_NONE = 0; }\n" + msg("string id = 1; Qty qty = 2;"),
     True, True, "", "SD"),
    ("scalar -> message", BASE, "message Q { int32 v = 1; }\n" + msg("string id = 1; Q qty = 2;"),
     False, False, "FIELD_KIND_CHANGED at #/Order/qty=2", "SD"),
    ("message field -> another message",
     "message A { int32 v = 1; } message B { int32 v = 1; }\n" + msg("A x = 1;"),
     "message A { int32 v = 1; } message B { int32 v = 1; }\n" + msg("B x = 1;"),
     False, False, "FIELD_NAMED_TYPE_CHANGED at #/Order/x=1", "SD"),
    ("nested message field type changed",
     msg("message Line { int32 qty = 1; } repeated Line lines = 1;"),
     msg("message Line { string qty = 1; } repeated Line lines = 1;"),
     False, False, "FIELD_SCALAR_KIND_CHANGED at #/Order/Line/qty=1", "SD"),
    ("map value int32 -> int64", msg("map<string, int32> m = 1;"), msg("map<string, int64> m = 1;"),
     True, True, "", "SD"),
    ("map value int32 -> string", msg("map<string, int32> m = 1;"),
     msg("map<string, string> m = 1;"), False, False, "FIELD_SCALAR_KIND_CHANGED", "SD"),
    ("map -> repeated message", "message E { string k = 1; int32 v = 2; }\n"
     + msg("map<string, int32> m = 1;"), "message E { string k = 1; int32 v = 2; }\n"
     + msg("repeated E m = 1;"), False, False, "FIELD_KIND_CHANGED", "SD"),
    ("remove a message", BASE + "\nmessage Extra { int32 v = 1; }", BASE,
     False, True, "MESSAGE_REMOVED at #/Extra", "SD"),
    ("add a message", BASE, BASE + "\nmessage Extra { int32 v = 1; }",
     True, False, "MESSAGE_REMOVED at #/Extra", "SD"),
    ("reorder messages", BASE + "\nmessage Extra { int32 v = 1; }",
     "message Extra { int32 v = 1; }\n" + BASE, True, True, "", "SD"),
    ("package changed", BASE, BASE, True, True, "", "SD"),  # package set below
    ("move one field into a new oneof", BASE, msg("oneof o { string id = 1; } int32 qty = 2;"),
     True, True, "", "DOC"),
    ("move two fields into a new oneof", BASE, msg("oneof o { string id = 1; int32 qty = 2; }"),
     False, True, "MULTIPLE_FIELDS_MOVED_TO_ONEOF at #/Order/oneof o", "DOC"),
    ("move a field into an existing oneof", msg("oneof o { string id = 1; } int32 qty = 2;"),
     msg("oneof o { string id = 1; int32 qty = 2; }"),
     False, False, "FIELD_MOVED_TO_EXISTING_ONEOF at #/Order/oneof o", "SD"),
    ("add a field to a oneof", msg("oneof o { string id = 1; }"),
     msg("oneof o { string id = 1; int32 qty = 2; }"),
     True, False, "ONEOF_FIELD_REMOVED at #/Order/oneof o/qty=2", "SD"),
    ("remove a field from a oneof", msg("oneof o { string id = 1; int32 qty = 2; }"),
     msg("oneof o { string id = 1; }"),
     False, True, "ONEOF_FIELD_REMOVED at #/Order/oneof o/qty=2", "SD"),
    ("rename a oneof", msg("oneof o { string id = 1; }"), msg("oneof p { string id = 1; }"),
     True, True, "", "SD"),
    ("proto3: singular -> repeated (no written label)", msg("int32 a = 1;"),
     msg("repeated int32 a = 1;"), True, True, "", "SD"),
    ("enum value added", "enum C { C_NONE = 0; }", "enum C { C_NONE = 0; C_RED = 1; }",
     True, True, "", "SD"),
    ("enum value removed", "enum C { C_NONE = 0; C_RED = 1; }", "enum C { C_NONE = 0; }",
     True, True, "", "SD"),
    ("enum value renamed", "enum C { C_NONE = 0; C_RED = 1; }",
     "enum C { C_NONE = 0; C_ROUGE = 1; }", True, True, "", "SD"),
    ("enum removed", BASE + "\nenum C { C_NONE = 0; }", BASE, True, True, "", "SD"),
    ("reuse a reserved number", msg("string id = 1; reserved 2;"),
     msg("string id = 1; string note = 2;"),
     False, True, "RESERVED_NUMBER_REUSED at #/Order/note=2", "LG"),
    ("remove a field, reserving its number and name", BASE,
     msg('string id = 1; reserved 2; reserved "qty";'), True, True, "", "LG"),
    ("remove a field, reserving only its number", BASE, msg("string id = 1; reserved 2;"),
     True, False, "RESERVED_NUMBER_REUSED at #/Order/qty=2", "LG"),
    ("reuse a reserved enum number", "enum C { C_NONE = 0; reserved 1; }",
     "enum C { C_NONE = 0; C_BLUE = 1; }",
     False, True, "RESERVED_NUMBER_REUSED at #/C/C_BLUE=1", "LG"),
]  # fmt: skip

PROTO2_CASES: list[tuple[str, str, str, bool, bool, str, str]] = [
    ("optional int32 -> repeated int32", msg("optional int32 a = 1;"),
     msg("repeated int32 a = 1;"),
     False, False, "FIELD_NUMERIC_LABEL_CHANGED at #/Order/a=1", "SD"),
    ("optional string -> repeated string", msg("optional string a = 1;"),
     msg("repeated string a = 1;"), True, True, "", "SD"),
    ("add a required field", msg("optional string a = 1;"),
     msg("optional string a = 1; required int32 b = 2;"),
     False, False, "REQUIRED_FIELD_ADDED at #/Order/b=2", "SD"),
    ("remove an optional field", msg("optional string a = 1; optional int32 b = 2;"),
     msg("optional string a = 1;"), True, True, "", "DOC"),
]  # fmt: skip


def _check(
    case: str, old: ProtobufModel, new: ProtobufModel, backward: bool, forward: bool, change: str
) -> None:
    backward_problems = reader_writer_incompatibilities(new, old)
    forward_problems = reader_writer_incompatibilities(old, new)
    described = [p.describe() for p in backward_problems + forward_problems]
    assert (not backward_problems, not forward_problems) == (backward, forward), (case, described)
    if change:
        assert any(change in line for line in described), (case, described)
    expected = {
        CompatibilityLevel.NONE: True,
        CompatibilityLevel.BACKWARD: backward,
        CompatibilityLevel.FORWARD: forward,
        CompatibilityLevel.FULL: backward and forward,
    }
    for level, accepted in expected.items():
        report = check_compatibility(
            level, new, [(1, old)], incompatibilities=reader_writer_incompatibilities
        )
        assert report.compatible is accepted, (case, level)


@pytest.mark.parametrize(
    ("case", "previous", "new", "backward", "forward", "change", "source"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_matrix(
    case: str, previous: str, new: str, backward: bool, forward: bool, change: str, source: str
) -> None:
    package = "acme.v2" if case == "package changed" else "acme"
    _check(case, model(previous), model(new, package=package), backward, forward, change)


@pytest.mark.parametrize(
    ("case", "previous", "new", "backward", "forward", "change", "source"),
    PROTO2_CASES,
    ids=[case[0] for case in PROTO2_CASES],
)
def test_proto2_labels(
    case: str, previous: str, new: str, backward: bool, forward: bool, change: str, source: str
) -> None:
    old, candidate = model(previous, syntax="proto2"), model(new, syntax="proto2")
    _check(case, old, candidate, backward, forward, change)


MONEY_V1 = 'syntax = "proto3";\npackage acme.common;\nmessage Money { int64 units = 1; }'
MONEY_V2 = 'syntax = "proto3";\npackage acme.common;\nmessage Money { string units = 1; }'
USES_MONEY = 'import "money.proto";\n' + msg("acme.common.Money total = 1;")


def test_an_imported_type_is_compared_through_its_reference() -> None:
    old = model(USES_MONEY, refs=(("money.proto", MONEY_V1),))
    same = model(USES_MONEY, refs=(("money.proto", MONEY_V1),))
    changed = model(USES_MONEY, refs=(("money.proto", MONEY_V2),))
    assert reader_writer_incompatibilities(same, old) == []
    described = [p.describe() for p in reader_writer_incompatibilities(changed, old)]
    assert "FIELD_SCALAR_KIND_CHANGED at #/Money/units=1" in described
    assert "FIELD_NAMED_TYPE_CHANGED at #/Order/total=1" in described


def test_a_recursive_message_terminates() -> None:
    tree = msg("string label = 1; repeated Order children = 2;")
    grown = msg("string label = 1; repeated Order children = 2; int32 depth = 3;")
    assert reader_writer_incompatibilities(model(grown), model(tree)) == []


def test_transitive_levels_check_every_version() -> None:
    v1 = model(msg("int32 a = 1;"))
    v2 = model(msg("string note = 2;"))  # a removed: compatible with v1
    v3 = model(msg("string note = 2; string a = 1;"))  # a back as a string: breaks v1 only
    plain = check_compatibility(
        CompatibilityLevel.BACKWARD, v3, [(1, v1), (2, v2)],
        incompatibilities=reader_writer_incompatibilities,
    )  # fmt: skip
    transitive = check_compatibility(
        CompatibilityLevel.BACKWARD_TRANSITIVE, v3, [(1, v1), (2, v2)],
        incompatibilities=reader_writer_incompatibilities,
    )  # fmt: skip
    assert plain.compatible
    assert not transitive.compatible
    assert any("FIELD_SCALAR_KIND_CHANGED at #/Order/a=1" in r for r in transitive.reasons)
    assert any("version 1" in r for r in transitive.reasons)
