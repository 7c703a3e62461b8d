"""JSON Schema compatibility matrix: each case's answer is Confluent's, cited.

Sources, by the tag each case carries:

- [SD]: the rule table of Confluent's checker, ``SchemaDiff.COMPATIBLE_CHANGES`` with the
  difference each change produces (``ObjectSchemaDiff``, ``NumberSchemaDiff``, ...), in
  confluentinc/schema-registry ``json-schema-provider/src/main/java/io/confluent/kafka/
  schemaregistry/json/diff/``; BACKWARD compares (previous, new), as
  ``JsonSchema.isBackwardCompatible`` calls ``SchemaDiff.compare(previous, this)``, and
  FORWARD the reverse.
- [DOC]: Confluent's "JSON Schema compatibility rules",
  https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/serdes-json.html,
  and the article it links, Robert Yokota's "Understanding JSON Schema Compatibility"
  (https://yokota.blog/2021/03/29/understanding-json-schema-compatibility/): with an open
  content model a property may be removed but not added under BACKWARD, with a closed one
  added but not removed; FORWARD is the mirror image.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import referencing

from lockgate.schema_registry.compatibility import check_compatibility
from lockgate.schema_registry.errors import InvalidSchemaError
from lockgate.schema_registry.json_compatibility import reader_writer_incompatibilities
from lockgate.schema_registry.json_schema import JsonSchemaModel, parse_json_schema
from lockgate.schema_registry.model import CompatibilityLevel


def model(schema: Any) -> JsonSchemaModel:
    """A parsed, validated JSON Schema."""
    return parse_json_schema(json.dumps(schema), max_bytes=1 << 20).model


def obj(properties: dict[str, Any], *, additional: Any = None, **extra: Any) -> dict[str, Any]:
    """An object schema; ``additional`` None leaves additionalProperties out (open)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if additional is not None:
        schema["additionalProperties"] = additional
    return schema


STR = {"type": "string"}
INT = {"type": "integer"}

#: (case, previous, new, BACKWARD accepts, FORWARD accepts, the change that decides, source)
CASES: list[tuple[str, Any, Any, bool, bool, str, str]] = [
    ("identical", obj({"a": STR}), obj({"a": STR}), True, True, "", "SD"),
    ("add property, open model", obj({"a": STR}), obj({"a": STR, "b": INT}),
     False, True, "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "DOC"),
    ("add property, closed model", obj({"a": STR}, additional=False),
     obj({"a": STR, "b": INT}, additional=False),
     True, False, "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "DOC"),
    ("remove property, open model", obj({"a": STR, "b": INT}), obj({"a": STR}),
     True, False, "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "DOC"),
    ("remove property, closed model", obj({"a": STR, "b": INT}, additional=False),
     obj({"a": STR}, additional=False),
     False, True, "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "DOC"),
    ("add property with an empty schema, open model", obj({"a": STR}), obj({"a": STR, "b": {}}),
     True, True, "", "SD"),
    ("add required property, closed model", obj({"a": STR}, additional=False),
     obj({"a": STR, "b": INT}, additional=False, required=["b"]),
     False, False, "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "SD"),
    ("add required property with a default, closed model", obj({"a": STR}, additional=False),
     obj({"a": STR, "b": {**INT, "default": 0}}, additional=False, required=["b"]),
     True, False, "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "SD"),
    ("property covered by additionalProperties", obj({}, additional=STR),
     obj({"b": STR}, additional=STR), True, True, "", "SD"),
    ("property not covered by additionalProperties", obj({}, additional=STR),
     obj({"b": INT}, additional=STR),
     False, False, "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "SD"),
    ("additionalProperties false -> true", obj({"a": STR}, additional=False),
     obj({"a": STR}, additional=True), True, False, "ADDITIONAL_PROPERTIES_REMOVED", "SD"),
    ("make a property required", obj({"a": STR}), obj({"a": STR}, required=["a"]),
     False, True, "REQUIRED_ATTRIBUTE_ADDED", "SD"),
    ("make a property with a default required", obj({"a": {**STR, "default": ""}}),
     obj({"a": {**STR, "default": ""}}, required=["a"]), True, True, "", "SD"),
    ("type changed string -> integer", obj({"a": STR}), obj({"a": INT}),
     False, False, "TYPE_CHANGED", "SD"),
    ("type widened integer -> number", obj({"a": INT}), obj({"a": {"type": "number"}}),
     True, False, "TYPE_NARROWED", "SD"),
    ("type widened to a union with null", obj({"a": STR}),
     obj({"a": {"type": ["string", "null"]}}), True, False, "TYPE_CHANGED", "SD"),
    ("enum widened", obj({"a": {"enum": ["x"]}}), obj({"a": {"enum": ["x", "y"]}}),
     True, False, "ENUM_ARRAY_NARROWED", "SD"),
    ("enum changed", obj({"a": {"enum": ["x"]}}), obj({"a": {"enum": ["y"]}}),
     False, False, "ENUM_ARRAY_CHANGED", "SD"),
    ("maxLength increased", obj({"a": {**STR, "maxLength": 5}}),
     obj({"a": {**STR, "maxLength": 9}}), True, False, "MAX_LENGTH_DECREASED", "SD"),
    ("minimum added", obj({"a": INT}), obj({"a": {**INT, "minimum": 0}}),
     False, True, "MINIMUM_ADDED", "SD"),
    ("array items changed", obj({"a": {"type": "array", "items": STR}}),
     obj({"a": {"type": "array", "items": INT}}), False, False, "TYPE_CHANGED", "SD"),
    ("uniqueItems added", obj({"a": {"type": "array", "items": STR}}),
     obj({"a": {"type": "array", "items": STR, "uniqueItems": True}}),
     False, True, "UNIQUE_ITEMS_ADDED", "SD"),
    ("anyOf gains a branch", {"anyOf": [STR]}, {"anyOf": [STR, INT]},
     True, False, "SUM_TYPE_NARROWED", "SD"),
    ("allOf gains a branch", {"allOf": [obj({"a": STR})]},
     {"allOf": [obj({"a": STR}), {"required": ["a"]}]}, False, True, "PRODUCT_TYPE_EXTENDED", "SD"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "previous", "new", "backward", "forward", "change", "source"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_matrix(
    case: str, previous: Any, new: Any, backward: bool, forward: bool, change: str, source: str
) -> None:
    old, candidate = model(previous), model(new)
    backward_problems = reader_writer_incompatibilities(candidate, old)
    forward_problems = reader_writer_incompatibilities(old, candidate)
    assert (not backward_problems, not forward_problems) == (backward, forward), (
        case,
        source,
        [p.describe() for p in backward_problems + forward_problems],
    )
    if change:
        assert any(change in p.describe() for p in backward_problems + forward_problems)
    # The levels follow from the two directions.
    expected = {
        CompatibilityLevel.NONE: True,
        CompatibilityLevel.BACKWARD: backward,
        CompatibilityLevel.FORWARD: forward,
        CompatibilityLevel.FULL: backward and forward,
    }
    for level, accepted in expected.items():
        report = check_compatibility(
            level, candidate, [(1, old)], incompatibilities=reader_writer_incompatibilities
        )
        assert report.compatible is accepted, (case, level)


def _required(with_default: bool | None) -> Any:
    """Property ``a``: optional (None), required with a default, or required without one."""
    if with_default is None:
        return obj({"a": STR})
    schema = {**STR, "default": ""} if with_default else STR
    return obj({"a": schema}, required=["a"])


@pytest.mark.parametrize(
    ("history", "level", "accepted"),
    [
        # [SD] REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED is compatible and the default may then go:
        # each step passes, but against version 1 the attribute was plainly added.
        ([None, True, False], CompatibilityLevel.BACKWARD, True),
        ([None, True, False], CompatibilityLevel.BACKWARD_TRANSITIVE, False),
        # The mirror image for FORWARD.
        ([False, True, None], CompatibilityLevel.FORWARD, True),
        ([False, True, None], CompatibilityLevel.FORWARD_TRANSITIVE, False),
        ([False, True, None], CompatibilityLevel.FULL, True),
        ([False, True, None], CompatibilityLevel.FULL_TRANSITIVE, False),
        ([None, True, False], CompatibilityLevel.NONE, True),
    ],
)
def test_transitive_levels_check_every_version(
    history: list[bool | None], level: CompatibilityLevel, accepted: bool
) -> None:
    *older, newest = [model(_required(step)) for step in history]
    report = check_compatibility(
        level,
        newest,
        list(enumerate(older, start=1)),
        incompatibilities=reader_writer_incompatibilities,
    )
    assert report.compatible is accepted, report.reasons
    if not accepted:
        assert any("REQUIRED_ATTRIBUTE_ADDED" in reason for reason in report.reasons)
        assert any("version 1" in reason for reason in report.reasons)


def test_a_ref_is_compared_through_what_it_points_to() -> None:
    previous = {"definitions": {"A": STR}, **obj({"a": {"$ref": "#/definitions/A"}})}
    new = {"definitions": {"A": INT}, **obj({"a": {"$ref": "#/definitions/A"}})}
    problems = reader_writer_incompatibilities(model(new), model(previous))
    assert [p.describe() for p in problems] == ["TYPE_CHANGED at #/properties/a"]


def test_a_recursive_schema_terminates() -> None:
    children = {"type": "array", "items": {"$ref": "#/definitions/node"}}
    tree = {"definitions": {"node": obj({"children": children})}, "$ref": "#/definitions/node"}
    assert reader_writer_incompatibilities(model(tree), model(tree)) == []


def test_a_schema_too_deep_to_compare_is_an_invalid_schema_not_a_crash() -> None:
    deep: dict[str, Any] = {}
    for _ in range(2000):
        deep = {"type": "object", "properties": {"a": deep}}
    nested = JsonSchemaModel(document=deep, resolver=referencing.Registry().resolver())
    with pytest.raises(InvalidSchemaError, match="nested too deeply"):
        reader_writer_incompatibilities(nested, nested)
