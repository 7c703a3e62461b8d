"""JSON Schema in the registry: validation, canonical ids, $ref references, evolution."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.schema_registry import errors
from lockgate.schema_registry.model import Subject, Version
from lockgate.schema_registry.references import ReferenceRequest
from lockgate.schema_registry.registry import SchemaRegistry

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
    "additionalProperties": False,
}


def register(registry: SchemaRegistry, subject: str, schema: Any, **kwargs: Any) -> int:
    """Register a JSON Schema; its id."""
    return int(
        registry.register(subject, json.dumps(schema), schema_type="JSON", **kwargs).schema_id
    )


def test_key_order_and_whitespace_do_not_change_the_id(registry: SchemaRegistry) -> None:
    first = register(registry, "people", PERSON)
    reordered = json.dumps(dict(reversed(list(PERSON.items()))), indent=4)
    again = registry.register("people", reordered, schema_type="json")
    assert (again.schema_id, again.created) == (first, False)
    assert register(registry, "others", PERSON) == first
    stored = registry.get_schema(first)
    assert stored.schema_type == "JSON"
    assert json.loads(stored.schema_text) == PERSON
    # The same text as Avro would be another schema: JSON is not Avro.
    found = registry.lookup("people", reordered, schema_type="JSON")
    assert found.schema_type == "JSON" and found.version == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"type": "strng"}', "not a valid JSON Schema at /type"),
        ('{"properties": {"a": {"minLength": -1}}}', "/properties/a/minLength"),
        ('{"$schema": "http://example.com/my-draft"}', "is not a JSON Schema draft"),
        ("[1, 2]", "must be a JSON object"),
        ("{nope", "not JSON"),
        ('{"properties": {"a": {"$ref": "other.json"}}}', "$ref 'other.json' at /properties/a"),
    ],
)
def test_an_invalid_schema_is_42201_with_the_reason(
    registry: SchemaRegistry, text: str, reason: str
) -> None:
    with pytest.raises(errors.InvalidSchemaError) as refused:
        registry.register("people", text, schema_type="JSON")
    assert refused.value.error_code == 42201
    assert reason in refused.value.message


def test_a_ref_to_another_subject_resolves_through_its_reference(
    registry: SchemaRegistry,
) -> None:
    address = {"type": "object", "properties": {"city": {"type": "string"}}}
    register(registry, "address", address)
    customer = {"type": "object", "properties": {"home": {"$ref": "address.json"}}}
    reference = ReferenceRequest("address.json", Subject("address"), Version(1))
    customer_id = register(registry, "customer", customer, references=[reference])
    assert registry.get_schema(customer_id).references[0].name == "address.json"
    assert registry.referenced_by("address", 1) == [customer_id]
    # An incompatible change inside the referenced type is found through the $ref.
    narrower = {**address, "properties": {"city": {"type": "integer"}}}
    registry.set_config("address", "NONE")
    register(registry, "address", narrower)
    moved = ReferenceRequest("address.json", Subject("address"), Version(2))
    report = registry.check(
        "customer", json.dumps(customer), schema_type="JSON", references=[moved]
    )
    assert not report.compatible
    assert any("TYPE_CHANGED at #/properties/home/properties/city" in r for r in report.reasons)


def test_backward_evolution_is_accepted_and_a_breaking_one_refused_with_reasons(
    registry: SchemaRegistry,
) -> None:
    register(registry, "people", PERSON)
    # Closed model: adding an optional property is BACKWARD compatible.
    with_email = {**PERSON, "properties": {**PERSON["properties"], "email": {"type": "string"}}}
    assert register(registry, "people", with_email)
    # Removing a property from a closed model, and changing a type, are not.
    broken = {**PERSON, "properties": {"name": {"type": "integer"}}}
    with pytest.raises(errors.IncompatibleSchemaError) as refused:
        register(registry, "people", broken)
    reasons = refused.value.reasons
    assert any("TYPE_CHANGED at #/properties/name" in r for r in reasons)
    assert any(
        "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at #/properties/age" in r for r in reasons
    )
    assert all("version 2" in r for r in reasons)


def test_a_subject_cannot_change_schema_type_unless_its_level_is_none(
    registry: SchemaRegistry,
) -> None:
    avro = {"type": "record", "name": "P", "fields": [{"name": "name", "type": "string"}]}
    registry.register("people", json.dumps(avro))
    with pytest.raises(errors.IncompatibleSchemaError) as refused:
        register(registry, "people", PERSON)
    assert "SCHEMA_TYPE_CHANGED: version 1 is AVRO, the new schema is JSON" in refused.value.message
    registry.set_config("people", "NONE")
    assert register(registry, "people", PERSON)


def test_one_text_as_avro_and_as_json_schema_is_two_schemas(registry: SchemaRegistry) -> None:
    # Valid in both languages, with the same key-sorted compact form in both.
    text = '{"type": "string", "maxLength": 3}'
    as_avro = registry.register("as-avro", text)
    as_json = registry.register("as-json", text, schema_type="JSON")
    assert as_avro.schema_id != as_json.schema_id
    assert registry.get_schema(as_json.schema_id).schema_type == "JSON"
    assert registry.get_schema(as_avro.schema_id).schema_type == "AVRO"


def test_a_relative_ref_resolves_against_the_root_id(registry: SchemaRegistry) -> None:
    register(registry, "address", {"type": "object", "properties": {"city": {"type": "string"}}})
    customer = {
        "$id": "https://example.com/schemas/customer.json",
        "type": "object",
        "properties": {"home": {"$ref": "address.json"}},
    }
    reference = ReferenceRequest("address.json", Subject("address"), Version(1))
    assert register(registry, "customer", customer, references=[reference])
