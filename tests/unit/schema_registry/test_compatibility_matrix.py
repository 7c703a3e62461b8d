"""Compatibility matrix: reader/writer pairs, the seven levels, and avro.compatibility's gaps.

Part A checks single reader/writer pairs (kind and path of every reason) and compares each
verdict with ``avro.compatibility`` (avro 1.12.2) where that library is right. Part B
checks subject histories under each of the seven levels, transitive and not. Part C pins
the known gaps of ``avro.compatibility`` that this registry fills.
"""

from __future__ import annotations

import json
from typing import Any

import avro.compatibility
import avro.schema
import pytest

from lockgate.schema_registry.avro_schema import parse_schema
from lockgate.schema_registry.compatibility import (
    IncompatibilityKind,
    check_compatibility,
    reader_writer_incompatibilities,
)
from lockgate.schema_registry.model import CompatibilityLevel

K = IncompatibilityKind


def avro_of(document: Any) -> avro.schema.Schema:
    """Parse a schema document without the default check (histories may predate it)."""
    return parse_schema(json.dumps(document), validate_defaults_too=False).avro_schema


def library_check(reader: avro.schema.Schema, writer: avro.schema.Schema) -> Any:
    """avro.compatibility's answer (the library is untyped)."""
    checker: Any = avro.compatibility.ReaderWriterCompatibilityChecker
    return checker().get_compatibility(reader, writer)


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A record schema document."""
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    """A field document."""
    return {"name": name, "type": kind, **extra}


def enum(name: str, symbols: list[str], **extra: Any) -> dict[str, Any]:
    """An enum schema document."""
    return {"type": "enum", "name": name, "symbols": symbols, **extra}


def fixed(name: str, size: int) -> dict[str, Any]:
    """A fixed schema document."""
    return {"type": "fixed", "name": name, "size": size}


A_INT = field("a", "int")
B_STR = field("b", "string")
B_STR_DEF = field("b", "string", default="x")

# (id, reader, writer, expected kinds (empty: compatible), expected path of the first reason)
PAIRS: list[tuple[str, Any, Any, list[IncompatibilityKind], str]] = [
    # primitives and promotions
    ("int-int", "int", "int", [], ""),
    ("long-int", "long", "int", [], ""),
    ("float-int", "float", "int", [], ""),
    ("double-int", "double", "int", [], ""),
    ("float-long", "float", "long", [], ""),
    ("double-long", "double", "long", [], ""),
    ("double-float", "double", "float", [], ""),
    ("int-long", "int", "long", [K.TYPE_MISMATCH], "/int"),
    ("long-float", "long", "float", [K.TYPE_MISMATCH], "/long"),
    ("float-double", "float", "double", [K.TYPE_MISMATCH], "/float"),
    ("bytes-string", "bytes", "string", [], ""),
    ("string-bytes", "string", "bytes", [], ""),
    ("string-int", "string", "int", [K.TYPE_MISMATCH], "/string"),
    ("boolean-int", "boolean", "int", [K.TYPE_MISMATCH], "/boolean"),
    ("null-null", "null", "null", [], ""),
    # records
    ("same-record", record("U", A_INT), record("U", A_INT), [], ""),
    ("reader-adds-default", record("U", A_INT, B_STR_DEF), record("U", A_INT), [], ""),
    (
        "reader-adds-no-default",
        record("U", A_INT, B_STR),
        record("U", A_INT),
        [K.READER_FIELD_MISSING_DEFAULT_VALUE],
        "/U/b",
    ),
    ("reader-drops-field", record("U", A_INT), record("U", A_INT, B_STR), [], ""),
    ("field-promoted", record("U", field("a", "long")), record("U", A_INT), [], ""),
    (
        "field-narrowed",
        record("U", A_INT),
        record("U", field("a", "long")),
        [K.TYPE_MISMATCH],
        "/U/a",
    ),
    ("record-renamed", record("V", A_INT), record("U", A_INT), [K.NAME_MISMATCH], "/V"),
    (
        "record-renamed-with-alias",
        record("V", A_INT, aliases=["U"]),
        record("U", A_INT),
        [],
        "",
    ),
    (
        "field-renamed-with-alias",
        record("U", field("z", "int", aliases=["a"])),
        record("U", A_INT),
        [],
        "",
    ),
    (
        "nested-record-field",
        record("U", field("addr", record("Addr", field("zip", "string"), field("city", "string")))),
        record("U", field("addr", record("Addr", field("zip", "string")))),
        [K.READER_FIELD_MISSING_DEFAULT_VALUE],
        "/U/addr/city",
    ),
    (
        "namespace-change",
        record("U", A_INT, namespace="n1"),
        record("U", A_INT, namespace="n2"),
        [],
        "",
    ),
    (
        "two-problems",
        record("U", field("a", "string"), B_STR),
        record("U", A_INT),
        [K.TYPE_MISMATCH, K.READER_FIELD_MISSING_DEFAULT_VALUE],
        "/U/a",
    ),
    # enums
    ("enum-same", enum("E", ["A", "B"]), enum("E", ["A", "B"]), [], ""),
    ("enum-reader-more", enum("E", ["A", "B", "C"]), enum("E", ["A", "B"]), [], ""),
    ("enum-reader-fewer", enum("E", ["A"]), enum("E", ["A", "B"]), [K.MISSING_ENUM_SYMBOLS], "/E"),
    (
        "enum-reader-fewer-with-default",
        enum("E", ["U", "A"], default="U"),
        enum("E", ["A", "B"]),
        [],
        "",
    ),
    ("enum-renamed", enum("F", ["A"]), enum("E", ["A"]), [K.NAME_MISMATCH], "/F"),
    # fixed
    ("fixed-same", fixed("F", 4), fixed("F", 4), [], ""),
    ("fixed-size", fixed("F", 8), fixed("F", 4), [K.FIXED_SIZE_MISMATCH], "/F"),
    ("fixed-renamed", fixed("G", 4), fixed("F", 4), [K.NAME_MISMATCH], "/G"),
    # arrays and maps
    (
        "array-promoted",
        {"type": "array", "items": "long"},
        {"type": "array", "items": "int"},
        [],
        "",
    ),
    (
        "array-mismatch",
        {"type": "array", "items": "int"},
        {"type": "array", "items": "string"},
        [K.TYPE_MISMATCH],
        "/array[]",
    ),
    (
        "map-promoted",
        {"type": "map", "values": "double"},
        {"type": "map", "values": "float"},
        [],
        "",
    ),
    (
        "map-mismatch",
        {"type": "map", "values": "int"},
        {"type": "map", "values": "boolean"},
        [K.TYPE_MISMATCH],
        "/map{}",
    ),
    (
        "array-vs-map",
        {"type": "array", "items": "int"},
        {"type": "map", "values": "int"},
        [K.TYPE_MISMATCH],
        "/array",
    ),
    # unions
    ("union-reads-branch", ["null", "string"], "string", [], ""),
    ("union-reads-promoted", ["null", "long"], "int", [], ""),
    ("union-lacks-branch", ["null", "string"], "int", [K.MISSING_UNION_BRANCH], "/union"),
    ("plain-reads-union", "string", ["null", "string"], [K.TYPE_MISMATCH], "/string<null>"),
    ("union-superset", ["null", "string", "int"], ["null", "string"], [], ""),
    (
        "union-subset",
        ["null", "string"],
        ["null", "string", "int"],
        [K.MISSING_UNION_BRANCH],
        "/union<int>",
    ),
    (
        "optional-field-becomes-required",
        record("U", field("a", "int")),
        record("U", field("a", ["null", "int"], default=None)),
        [K.TYPE_MISMATCH],
        "/U/a<null>",
    ),
    (
        "recursive-list",
        record("Node", field("v", "long"), field("next", ["null", "Node"], default=None)),
        record("Node", field("v", "int"), field("next", ["null", "Node"], default=None)),
        [],
        "",
    ),
]


@pytest.mark.parametrize(
    ("reader", "writer", "kinds", "path"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_reader_writer_pair(
    reader: Any, writer: Any, kinds: list[IncompatibilityKind], path: str
) -> None:
    problems = reader_writer_incompatibilities(avro_of(reader), avro_of(writer))
    assert [problem.kind for problem in problems] == kinds
    if kinds:
        assert problems[0].path == path
        assert problems[0].message  # says what breaks


# Pairs where avro.compatibility (1.12.2) gives a different verdict: see Part C.
AVRO_LIBRARY_GAPS = {"record-renamed-with-alias"}


@pytest.mark.parametrize(
    ("reader", "writer", "kinds"),
    [(p[1], p[2], p[3]) for p in PAIRS if p[0] not in AVRO_LIBRARY_GAPS],
    ids=[p[0] for p in PAIRS if p[0] not in AVRO_LIBRARY_GAPS],
)
def test_verdict_agrees_with_avro_library(
    reader: Any, writer: Any, kinds: list[IncompatibilityKind]
) -> None:
    result = library_check(avro_of(reader), avro_of(writer))
    library_compatible = (
        result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible
    )
    assert library_compatible == (not kinds)


# --- Part B: levels over subject histories ------------------------------------------------

V_A = record("U", A_INT)
V_AB_DEF = record("U", A_INT, B_STR_DEF)
V_AB = record("U", A_INT, B_STR)
V_EMPTY = record("U")
V_A_STR_DEF = record("U", field("a", "string", default=""))
V_A_LONG = record("U", field("a", "long"))

L = CompatibilityLevel
# (id, history oldest first, new schema, level, expected compatible)
LEVEL_CASES: list[tuple[str, list[Any], Any, CompatibilityLevel, bool]] = [
    # the story: v2 adds a field with a default, v3 adds one without
    ("backward-add-default", [V_A], V_AB_DEF, L.BACKWARD, True),
    (
        "backward-add-no-default",
        [V_A, V_AB_DEF],
        record("U", A_INT, B_STR_DEF, field("c", "int")),
        L.BACKWARD,
        False,
    ),
    ("backward-remove-field", [V_AB], V_A, L.BACKWARD, True),
    ("backward-promote", [V_A], V_A_LONG, L.BACKWARD, True),
    ("backward-narrow", [V_A_LONG], V_A, L.BACKWARD, False),
    ("backward-empty-subject", [], V_AB, L.BACKWARD, True),
    # non-transitive checks only the latest; transitive checks all
    ("backward-only-latest", [V_A, V_EMPTY], V_A_STR_DEF, L.BACKWARD, True),
    ("backward-transitive-all", [V_A, V_EMPTY], V_A_STR_DEF, L.BACKWARD_TRANSITIVE, False),
    (
        "backward-transitive-ok",
        [V_A, V_AB_DEF],
        V_AB_DEF | {"doc": "same fields"},
        L.BACKWARD_TRANSITIVE,
        True,
    ),
    (
        "backward-transitive-add-default",
        [V_A, V_AB_DEF],
        record("U", A_INT, B_STR_DEF, field("c", "int", default=0)),
        L.BACKWARD_TRANSITIVE,
        True,
    ),
    # forward: the old schema reads the new data
    ("forward-add-field", [V_A], V_AB, L.FORWARD, True),
    ("forward-remove-defaulted", [V_AB_DEF], V_A, L.FORWARD, True),
    ("forward-remove-required", [V_AB], V_A, L.FORWARD, False),
    ("forward-promote", [V_A], V_A_LONG, L.FORWARD, False),
    ("forward-narrow", [V_A_LONG], V_A, L.FORWARD, True),
    ("forward-only-latest", [V_AB, V_AB_DEF], V_A, L.FORWARD, True),
    ("forward-transitive-all", [V_AB, V_AB_DEF], V_A, L.FORWARD_TRANSITIVE, False),
    ("forward-transitive-ok", [V_A, V_A], V_AB, L.FORWARD_TRANSITIVE, True),
    # full: both directions
    ("full-add-default", [V_A], V_AB_DEF, L.FULL, True),
    ("full-add-no-default", [V_A], V_AB, L.FULL, False),
    ("full-remove-defaulted", [V_AB_DEF], V_A, L.FULL, True),
    ("full-remove-required", [V_AB], V_A, L.FULL, False),
    ("full-promote", [V_A], V_A_LONG, L.FULL, False),
    ("full-only-latest", [V_AB, V_AB_DEF], V_A, L.FULL, True),
    ("full-transitive-all", [V_AB, V_AB_DEF], V_A, L.FULL_TRANSITIVE, False),
    (
        "full-transitive-ok",
        [V_A, V_AB_DEF],
        record("U", A_INT, B_STR_DEF, field("c", "int", default=1)),
        L.FULL_TRANSITIVE,
        True,
    ),
    # none accepts anything
    ("none-type-change", [V_A], record("U", field("a", "string")), L.NONE, True),
    ("none-rename", [V_A], record("Other", A_INT), L.NONE, True),
    # enums under the levels
    ("backward-enum-add-symbol", [enum("E", ["A"])], enum("E", ["A", "B"]), L.BACKWARD, True),
    ("forward-enum-add-symbol", [enum("E", ["A"])], enum("E", ["A", "B"]), L.FORWARD, False),
    (
        "forward-enum-add-symbol-reader-default",
        [enum("E", ["Z", "A"], default="Z")],
        enum("E", ["Z", "A", "B"]),
        L.FORWARD,
        True,
    ),
    ("full-enum-remove-symbol", [enum("E", ["A", "B"])], enum("E", ["A"]), L.FULL, False),
    # unions under the levels
    (
        "backward-make-optional",
        [V_A],
        record("U", field("a", ["null", "int"], default=None)),
        L.BACKWARD,
        True,
    ),
    (
        "forward-make-optional",
        [V_A],
        record("U", field("a", ["null", "int"], default=None)),
        L.FORWARD,
        False,
    ),
    (
        "backward-widen-union",
        [record("U", field("a", ["null", "int"], default=None))],
        record("U", field("a", ["null", "int", "string"], default=None)),
        L.BACKWARD,
        True,
    ),
    (
        "forward-widen-union",
        [record("U", field("a", ["null", "int"], default=None))],
        record("U", field("a", ["null", "int", "string"], default=None)),
        L.FORWARD,
        False,
    ),
]


@pytest.mark.parametrize(
    ("history", "new", "level", "expected"),
    [c[1:] for c in LEVEL_CASES],
    ids=[c[0] for c in LEVEL_CASES],
)
def test_level(history: list[Any], new: Any, level: CompatibilityLevel, expected: bool) -> None:
    existing = [(index + 1, avro_of(old)) for index, old in enumerate(history)]
    report = check_compatibility(level, avro_of(new), existing)
    assert report.compatible is expected
    assert report.level is level
    if expected:
        assert report.reasons == ()
    else:
        assert report.reasons, "an incompatible answer must say why"
        assert all(level.value in reason for reason in report.reasons)


def test_matrix_is_large_enough() -> None:
    # The issue asks for at least 60 reader/writer pairs across all seven levels.
    assert len(PAIRS) + len(LEVEL_CASES) >= 60
    assert {case[3] for case in LEVEL_CASES} == set(CompatibilityLevel)


def test_reason_names_field_and_version() -> None:
    history = [(1, avro_of(V_A)), (2, avro_of(V_AB_DEF))]
    v3 = avro_of(record("U", A_INT, B_STR_DEF, field("email", "string")))
    report = check_compatibility(L.BACKWARD, v3, history)
    assert not report.compatible
    (reason,) = report.reasons
    assert reason.startswith("READER_FIELD_MISSING_DEFAULT_VALUE at /U/email:")
    assert "version 2" in reason and "no default" in reason


def test_transitive_reports_every_version() -> None:
    history = [(1, avro_of(V_A)), (2, avro_of(V_A))]
    report = check_compatibility(L.BACKWARD_TRANSITIVE, avro_of(V_AB), history)
    assert len(report.reasons) == 2
    assert any("version 1" in r for r in report.reasons) and any(
        "version 2" in r for r in report.reasons
    )


# --- Part C: gaps of avro.compatibility (avro 1.12.2) ----------------------------------------


def test_gap_library_loses_pairing_of_reason_and_path() -> None:
    reader, writer = avro_of(record("U", field("a", "string"), B_STR)), avro_of(record("U", A_INT))
    library = library_check(reader, writer)
    # The library returns sets of messages and of index-based locations, unpaired.
    assert isinstance(library.messages, set) and isinstance(library.locations, set)
    assert "/fields/0" in library.locations or "fields/0" in " ".join(library.locations)
    ours = reader_writer_incompatibilities(reader, writer)
    assert [(p.kind, p.path) for p in ours] == [
        (K.TYPE_MISMATCH, "/U/a"),
        (K.READER_FIELD_MISSING_DEFAULT_VALUE, "/U/b"),
    ]


def test_gap_library_ignores_namespace_of_aliases() -> None:
    # Avro: aliases are relative to the schema's namespace. The library compares the raw
    # alias with the writer's full name and refuses a legitimate rename.
    reader = avro_of(record("New", A_INT, namespace="ns", aliases=["Old"]))
    writer = avro_of(record("Old", A_INT, namespace="ns"))
    library = library_check(reader, writer)
    assert library.compatibility is avro.compatibility.SchemaCompatibilityType.incompatible
    assert reader_writer_incompatibilities(reader, writer) == []


def test_gap_library_compares_enum_field_with_whole_writer_record() -> None:
    # A new enum field with an enum default but no field default: the library checks the
    # enum against the writer's *record* and reports a meaningless type mismatch; the real
    # problem is the missing field default (the enum default is for unknown symbols only).
    reader = avro_of(record("U", field("e", enum("E", ["A", "B"], default="A"))))
    writer = avro_of(record("U"))
    library = library_check(reader, writer)
    assert library.messages == {"reader type: enum not compatible with writer type: record"}
    (problem,) = reader_writer_incompatibilities(reader, writer)
    assert problem.kind is K.READER_FIELD_MISSING_DEFAULT_VALUE and problem.path == "/U/e"


def test_gap_library_accepts_wrong_default() -> None:
    document = record("U", field("a", "int", default="not a number"))
    avro.schema.parse(json.dumps(document))  # the library accepts it
    from lockgate.schema_registry.errors import InvalidSchemaError

    with pytest.raises(InvalidSchemaError, match=r"U\.a"):
        parse_schema(json.dumps(document))
