"""Avro schema references on a real SQLite file: resolution, identity, compatibility, deletes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.schema_registry import errors
from lockgate.schema_registry.model import SchemaReference, Subject, Version
from lockgate.schema_registry.references import ReferenceRequest, parse_reference
from lockgate.schema_registry.registry import SchemaRegistry

ADDRESS_V1 = {
    "type": "record",
    "name": "Address",
    "namespace": "dev.lockgate.geo",
    "fields": [{"name": "city", "type": "string"}],
}
ADDRESS_V2 = {
    **ADDRESS_V1,
    "fields": [*ADDRESS_V1["fields"], {"name": "zip", "type": "string", "default": ""}],
}
ADDRESS_NO_DEFAULT = {**ADDRESS_V1, "fields": [{"name": "zip", "type": "string"}]}
#: A record holding the referenced type by name, as Confluent's clients send it.
CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "dev.lockgate.shop",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "home", "type": "dev.lockgate.geo.Address"},
    ],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "dev.lockgate.shop",
    "fields": [{"name": "buyer", "type": "dev.lockgate.shop.Customer"}],
}


def ref(name: str, subject: str, version: int | None) -> ReferenceRequest:
    """A reference request (None: latest)."""
    return ReferenceRequest(name, Subject(subject), None if version is None else Version(version))


def text(schema: dict[str, Any]) -> str:
    """Schema JSON text."""
    return json.dumps(schema)


def test_a_reference_resolves_and_is_stored_with_its_pinned_version(
    registry: SchemaRegistry,
) -> None:
    registry.register("address", text(ADDRESS_V1))
    result = registry.register(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", None)]
    )
    stored = registry.get_schema(result.schema_id)
    # "latest" is stored as the number it meant; the type stays a name, not inlined.
    assert stored.references == (
        SchemaReference("dev.lockgate.geo.Address", Subject("address"), Version(1)),
    )
    assert json.loads(stored.schema_text)["fields"][1]["type"] == "dev.lockgate.geo.Address"
    assert registry.get_version("customer", 1).references == stored.references
    # The same text and references registered again is the same schema.
    again = registry.register(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    assert (again.schema_id, again.created) == (result.schema_id, False)
    found = registry.lookup(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    assert found.version == 1


def test_references_are_part_of_the_identity(registry: SchemaRegistry) -> None:
    registry.register("address", text(ADDRESS_V1))
    registry.register("address", text(ADDRESS_V2))
    on_v1 = registry.register(
        "c1", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    on_v2 = registry.register(
        "c2", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 2)]
    )
    assert on_v1.schema_id != on_v2.schema_id
    with pytest.raises(errors.SchemaNotFoundError):
        registry.lookup(
            "c1", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 2)]
        )


def test_references_of_references_resolve(registry: SchemaRegistry) -> None:
    registry.register("address", text(ADDRESS_V1))
    registry.register(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    order = registry.register(
        "order", text(ORDER), references=[ref("dev.lockgate.shop.Customer", "customer", 1)]
    )
    assert order.created
    assert registry.referenced_by("customer", 1) == [order.schema_id]


@pytest.mark.parametrize(
    ("reference", "named"),
    [
        (ref("dev.lockgate.geo.Address", "nowhere", 1), "'nowhere' and version 1"),
        (ref("dev.lockgate.geo.Address", "address", 7), "'address' and version 7"),
        (ref("dev.lockgate.geo.Address", "nowhere", None), "'nowhere' and version latest"),
    ],
)
def test_a_missing_reference_is_an_invalid_schema(
    registry: SchemaRegistry, reference: ReferenceRequest, named: str
) -> None:
    registry.register("address", text(ADDRESS_V1))
    with pytest.raises(errors.InvalidSchemaError) as refused:
        registry.register("customer", text(CUSTOMER), references=[reference])
    assert refused.value.error_code == 42201
    assert f"no schema reference found for subject {named}" in refused.value.message
    assert refused.value.field == "references"


def test_an_unresolved_type_without_its_reference_is_refused(registry: SchemaRegistry) -> None:
    registry.register("address", text(ADDRESS_V1))
    with pytest.raises(errors.InvalidSchemaError) as refused:
        registry.register("customer", text(CUSTOMER))
    assert "dev.lockgate.geo.Address" in refused.value.message


def test_a_new_schema_cannot_reference_a_soft_deleted_version(registry: SchemaRegistry) -> None:
    registry.register("address", text(ADDRESS_V1))
    registry.register("address", text(ADDRESS_V2))
    registry.delete_version("address", 1)
    with pytest.raises(errors.InvalidSchemaError):
        registry.register(
            "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
        )


def test_compatibility_is_checked_with_the_referenced_types_resolved(
    registry: SchemaRegistry,
) -> None:
    registry.register("address", text(ADDRESS_V1))
    registry.register("address-nd", text(ADDRESS_NO_DEFAULT))
    registry.register(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    registry.register("address", text(ADDRESS_V2))
    # Address v2 adds zip with a default: the new Customer reads old data (BACKWARD).
    fine = registry.check(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 2)]
    )
    assert fine.compatible
    # A zip without a default cannot read v1's Customers: the reason names the inner field.
    broken = registry.check(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address-nd", 1)]
    )
    assert not broken.compatible
    assert any("/Customer/home/zip" in reason for reason in broken.reasons)
    with pytest.raises(errors.IncompatibleSchemaError):
        registry.register(
            "customer",
            text(CUSTOMER),
            references=[ref("dev.lockgate.geo.Address", "address-nd", 1)],
        )


def test_a_referenced_version_cannot_be_deleted_while_referenced(
    registry: SchemaRegistry,
) -> None:
    registry.register("address", text(ADDRESS_V1))
    customer = registry.register(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    assert registry.referenced_by("address", 1) == [customer.schema_id]
    for delete in (
        lambda: registry.delete_version("address", 1),
        lambda: registry.delete_subject("address"),
    ):
        with pytest.raises(errors.ReferenceExistsError) as refused:
            delete()
        assert refused.value.error_code == 42206
        assert str(customer.schema_id) in refused.value.message
    # A soft-deleted referrer still holds the reference (its id stays readable)...
    registry.delete_version("customer", 1)
    with pytest.raises(errors.ReferenceExistsError):
        registry.delete_version("address", 1)
    # ...until it is deleted for good.
    registry.delete_version("customer", 1, permanent=True)
    assert registry.referenced_by("address", 1) == []
    assert registry.delete_version("address", 1) == 1
    # The referrer's id still resolves, references included.
    assert registry.get_schema(customer.schema_id).references[0].subject == "address"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ((None, "address", 1), "has no 'name'"),
        (("A", None, 1), "has no 'subject'"),
        (("A", "address", None), "has no 'version'"),
        (("A", "address", True), "has no 'version'"),
        (("A", "address", 0), "not a valid version"),
        (("A", "", 1), "Subject name is empty"),
    ],
)
def test_malformed_references_are_invalid_schemas(raw: tuple[Any, Any, Any], problem: str) -> None:
    with pytest.raises(errors.InvalidSchemaError) as refused:
        parse_reference(0, *raw)
    assert problem in refused.value.message
    assert "reference #1" in refused.value.message


def test_resolved_text_inlines_the_referenced_types(registry: SchemaRegistry) -> None:
    registry.register("address", text(ADDRESS_V1))
    customer = registry.register(
        "customer", text(CUSTOMER), references=[ref("dev.lockgate.geo.Address", "address", 1)]
    )
    stored = registry.get_schema(customer.schema_id)
    resolved = json.loads(registry.resolved_text(stored))
    assert resolved["fields"][1]["type"]["name"] == "Address"
    assert resolved["fields"][1]["type"]["fields"] == ADDRESS_V1["fields"]
    # Without references the text is the stored one.
    address = registry.get_version("address", 1)
    assert registry.resolved_text(address) == address.schema_text
