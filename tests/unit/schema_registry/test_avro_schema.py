"""Parsing, validation and normalisation of Avro schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.schema_registry.avro_schema import parse_schema
from lockgate.schema_registry.errors import InvalidSchemaError


def fingerprint(document: Any) -> str:
    """Fingerprint of a schema document."""
    return parse_schema(json.dumps(document)).fingerprint


def test_same_schema_other_whitespace_and_key_order_is_one_schema() -> None:
    compact = '{"type":"record","name":"U","fields":[{"name":"a","type":"int"}]}'
    spaced = (
        '{\n  "fields" : [ { "type" : "int", "name" : "a" } ],\n'
        '  "name" : "U",  "type": "record"\n}'
    )
    assert parse_schema(compact).fingerprint == parse_schema(spaced).fingerprint
    assert parse_schema(compact).normalized_text == parse_schema(spaced).normalized_text


def test_equivalent_spellings_normalise_alike() -> None:
    qualified = {
        "type": "record",
        "name": "a.b.U",
        "fields": [{"name": "f", "type": {"type": "int"}}],
    }
    split = {
        "type": "record",
        "name": "U",
        "namespace": "a.b",
        "fields": [{"name": "f", "type": "int"}],
    }
    assert fingerprint(qualified) == fingerprint(split)
    assert fingerprint({"type": "string"}) == fingerprint("string")


def test_different_defaults_are_different_schemas() -> None:
    base = {"type": "record", "name": "U", "fields": [{"name": "a", "type": "int", "default": 1}]}
    other = {"type": "record", "name": "U", "fields": [{"name": "a", "type": "int", "default": 2}]}
    assert fingerprint(base) != fingerprint(other)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("{not json", "not JSON"),
        ('{"type": "record", "name": "U"}', "not valid Avro"),
        ('{"type": "recrod", "name": "U", "fields": []}', "not valid Avro"),
        ('{"type": "record", "name": "1bad", "fields": []}', "not valid Avro"),
        ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "not valid Avro"),
        ('{"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"}', "not valid Avro"),
        ('{"type": "fixed", "name": "F"}', "not valid Avro"),
        ('"nosuchtype"', "not valid Avro"),
    ],
)
def test_invalid_schema_text(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message) as caught:
        parse_schema(text)
    assert caught.value.error_code == 42201


def _with_default(kind: Any, default: Any) -> str:
    return json.dumps(
        {"type": "record", "name": "U", "fields": [{"name": "f", "type": kind, "default": default}]}
    )


@pytest.mark.parametrize(
    ("kind", "default"),
    [
        ("int", "x"),
        ("int", 1.5),
        ("int", 2**31),
        ("int", True),
        ("long", "1"),
        ("boolean", 0),
        ("string", 1),
        ("bytes", None),
        ("null", 0),
        ("double", "1.0"),
        (["null", "string"], "x"),
        (["string", "null"], None),
        ({"type": "array", "items": "int"}, ["a"]),
        ({"type": "map", "values": "int"}, {"k": "v"}),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, "B"),
        ({"type": "fixed", "name": "F", "size": 2}, "abc"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]}, {}),
    ],
)
def test_wrong_default_is_refused(kind: Any, default: Any) -> None:
    with pytest.raises(
        InvalidSchemaError, match=r"default .* of field U\.f does not match"
    ) as caught:
        parse_schema(_with_default(kind, default))
    assert caught.value.error_code == 42201


@pytest.mark.parametrize(
    ("kind", "default"),
    [
        ("int", 7),
        ("long", 2**40),
        ("double", 1),
        ("float", 0.5),
        ("string", ""),
        ("bytes", "\u00ff"),
        ("boolean", False),
        (["null", "string"], None),
        (["string", "null"], "x"),
        ({"type": "array", "items": "int"}, [1, 2]),
        ({"type": "map", "values": "int"}, {"k": 1}),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, "A"),
        ({"type": "fixed", "name": "F", "size": 2}, "ab"),
        (
            {"type": "record", "name": "R", "fields": [{"name": "x", "type": "int", "default": 0}]},
            {},
        ),
    ],
)
def test_right_default_is_accepted(kind: Any, default: Any) -> None:
    parse_schema(_with_default(kind, default))


def test_union_default_message_says_how_to_fix() -> None:
    with pytest.raises(InvalidSchemaError, match="reorder the union"):
        parse_schema(_with_default(["null", "string"], "x"))


def test_nested_default_path_is_named() -> None:
    inner = {
        "type": "record",
        "name": "Addr",
        "fields": [{"name": "zip", "type": "int", "default": "x"}],
    }
    text = json.dumps({"type": "record", "name": "U", "fields": [{"name": "addr", "type": inner}]})
    with pytest.raises(InvalidSchemaError, match=r"U\.addr\.zip"):
        parse_schema(text)


def test_too_large_schema_is_refused_before_parsing() -> None:
    huge = json.dumps({"type": "record", "name": "U", "fields": [], "doc": "x" * 2_000_000})
    with pytest.raises(InvalidSchemaError, match="the limit is 1048576 bytes"):
        parse_schema(huge)


def test_deep_nesting_is_refused_cleanly() -> None:
    with pytest.raises(InvalidSchemaError):
        parse_schema("[" * 100_000 + "]" * 100_000)
