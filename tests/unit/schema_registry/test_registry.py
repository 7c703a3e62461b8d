"""The registry's operations on a real SQLite file (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.schema_registry import errors
from lockgate.schema_registry.model import CompatibilityLevel, Subject
from lockgate.schema_registry.registry import SchemaRegistry


def user(*extra_fields: dict[str, Any]) -> str:
    """A User record schema with field ``name`` and the extra fields."""
    fields = [{"name": "name", "type": "string"}, *extra_fields]
    return json.dumps({"type": "record", "name": "User", "namespace": "ex", "fields": fields})


EMAIL_DEFAULT = {"name": "email", "type": "string", "default": ""}
AGE_REQUIRED = {"name": "age", "type": "int"}


def test_registration_is_idempotent_and_ids_are_global(registry: SchemaRegistry) -> None:
    first = registry.register("a-value", user())
    again = registry.register("a-value", user().replace(",", ", "))
    other_subject = registry.register("b-value", user())
    assert first.created and not again.created
    assert (again.schema_id, again.version) == (first.schema_id, first.version)
    assert other_subject.schema_id == first.schema_id and other_subject.version == 1
    second = registry.register("a-value", user(EMAIL_DEFAULT))
    assert second.version == 2 and second.schema_id != first.schema_id
    assert [v.version for v in registry.list_versions("a-value")] == [1, 2]
    assert registry.get_version("a-value", "latest").schema_id == second.schema_id
    assert registry.list_subjects() == ["a-value", "b-value"]
    assert registry.schema_usages(first.schema_id) == [("a-value", 1), ("b-value", 1)]


def test_incompatible_registration_is_refused_and_changes_nothing(registry: SchemaRegistry) -> None:
    registry.register("s", user())
    registry.register("s", user(EMAIL_DEFAULT))
    max_id = registry.store.max_schema_id()
    with pytest.raises(errors.IncompatibleSchemaError) as caught:
        registry.register("s", user(EMAIL_DEFAULT, AGE_REQUIRED))
    assert caught.value.error_code == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE at /User/age" in caught.value.message
    assert registry.store.max_schema_id() == max_id
    assert [v.version for v in registry.list_versions("s")] == [1, 2]


def test_compatibility_config_falls_back_to_global(registry: SchemaRegistry) -> None:
    assert registry.get_config(None) is CompatibilityLevel.BACKWARD
    assert registry.get_config("s") is None
    assert registry.get_config("s", default_to_global=True) is CompatibilityLevel.BACKWARD
    registry.set_config(None, "full")
    registry.set_config("s", "NONE")
    assert registry.effective_level(Subject("s")) is CompatibilityLevel.NONE
    registry.register("s", user())
    registry.register("s", user(AGE_REQUIRED))  # NONE: accepted
    assert registry.delete_config("s") is CompatibilityLevel.NONE
    assert registry.get_config("s", default_to_global=True) is CompatibilityLevel.FULL
    with pytest.raises(errors.IncompatibleSchemaError):
        registry.register("s", user(AGE_REQUIRED, {"name": "x", "type": "int"}))
    assert registry.delete_config(None) is CompatibilityLevel.FULL
    assert registry.get_config(None) is CompatibilityLevel.BACKWARD


def test_unknown_level_is_refused(registry: SchemaRegistry) -> None:
    with pytest.raises(errors.InvalidCompatibilityLevelError, match="BACKWARD_TRANSITIVE"):
        registry.set_config(None, "SIDEWAYS")
    assert registry.get_config(None) is CompatibilityLevel.BACKWARD


def test_soft_and_permanent_delete_follow_confluent(registry: SchemaRegistry) -> None:
    v1 = registry.register("s", user())
    registry.register("s", user(EMAIL_DEFAULT))
    with pytest.raises(errors.VersionNotSoftDeletedError):
        registry.delete_version("s", 1, permanent=True)
    assert registry.delete_version("s", 1) == 1
    with pytest.raises(errors.VersionSoftDeletedError):
        registry.delete_version("s", 1)
    assert [v.version for v in registry.list_versions("s")] == [2]
    assert [v.version for v in registry.list_versions("s", include_deleted=True)] == [1, 2]
    with pytest.raises(errors.VersionNotFoundError):
        registry.get_version("s", 1)
    assert registry.get_version("s", 1, include_deleted=True).deleted
    # Ids stay resolvable: records in Kafka still carry them.
    assert registry.get_schema(v1.schema_id).schema_id == v1.schema_id
    with pytest.raises(errors.SubjectNotSoftDeletedError):
        registry.delete_subject("s", permanent=True)
    assert registry.delete_subject("s") == [2]
    with pytest.raises(errors.SubjectSoftDeletedError):
        registry.delete_subject("s")
    with pytest.raises(errors.SubjectNotFoundError):
        registry.list_versions("s")
    assert registry.list_subjects() == []
    assert registry.list_subjects(include_deleted=True) == ["s"]
    assert registry.delete_subject("s", permanent=True) == [1, 2]
    assert registry.list_subjects(include_deleted=True) == []
    # Registering again after a permanent delete starts at version 1 with the same id.
    again = registry.register("s", user())
    assert (again.version, again.schema_id) == (1, v1.schema_id)


def test_reregistering_a_soft_deleted_schema_makes_a_new_version(registry: SchemaRegistry) -> None:
    first = registry.register("s", user())
    registry.delete_version("s", 1)
    again = registry.register("s", user())
    assert again.created and again.version == 2 and again.schema_id == first.schema_id


def test_lookup(registry: SchemaRegistry) -> None:
    registry.register("s", user())
    found = registry.lookup("s", user())
    assert (found.subject, found.version) == ("s", 1)
    with pytest.raises(errors.SchemaNotFoundError):
        registry.lookup("s", user(EMAIL_DEFAULT))
    with pytest.raises(errors.SubjectNotFoundError):
        registry.lookup("nope", user())


@pytest.mark.parametrize("version", ["0", "-2", "abc", "2147483648", "1.5"])
def test_invalid_version(registry: SchemaRegistry, version: str) -> None:
    registry.register("s", user())
    with pytest.raises(errors.InvalidVersionError):
        registry.get_version("s", version)


@pytest.mark.parametrize("subject", ["", "   ", "a\nb", "x" * 256])
def test_invalid_subject(registry: SchemaRegistry, subject: str) -> None:
    with pytest.raises(errors.InvalidSubjectError):
        registry.register(subject, user())


def test_unknown_ids_and_versions(registry: SchemaRegistry) -> None:
    registry.register("s", user())
    with pytest.raises(errors.SchemaNotFoundError):
        registry.get_schema(999)
    with pytest.raises(errors.VersionNotFoundError):
        registry.get_version("s", 7)
    with pytest.raises(errors.SubjectNotFoundError):
        registry.get_version("nope", 1)


def test_check_against_one_version_and_all(registry: SchemaRegistry) -> None:
    registry.set_config("s", "BACKWARD_TRANSITIVE")
    registry.register(
        "s", json.dumps({"type": "record", "name": "U", "fields": [{"name": "a", "type": "int"}]})
    )
    registry.register("s", json.dumps({"type": "record", "name": "U", "fields": []}))
    candidate = json.dumps(
        {"type": "record", "name": "U", "fields": [{"name": "a", "type": "string", "default": ""}]}
    )
    assert registry.check("s", candidate, version="latest").compatible
    against_all = registry.check("s", candidate)
    assert not against_all.compatible and "version 1" in against_all.reasons[0]
    assert not registry.check("s", candidate, version=1).compatible


def test_a_schema_type_not_served_is_refused(registry: SchemaRegistry) -> None:
    with pytest.raises(errors.InvalidSchemaError, match="serves AVRO, JSON, PROTOBUF"):
        registry.register("s", "{}", schema_type="THRIFT")


def test_deleted_only_listings(registry: SchemaRegistry) -> None:
    registry.register("half", user())
    registry.register("half", user(EMAIL_DEFAULT))
    registry.delete_version("half", 1)
    registry.register("gone", user())
    registry.delete_subject("gone")
    assert registry.list_subjects(deleted_only=True) == ["gone"]
    assert registry.list_subjects(include_deleted=True) == ["gone", "half"]
    assert [v.version for v in registry.list_versions("half", deleted_only=True)] == [1]
    assert [v.version for v in registry.list_versions("half")] == [2]


def test_subject_prefix_and_schema_listing(registry: SchemaRegistry) -> None:
    registry.register("orders-value", user())
    registry.register("orders-value", user(EMAIL_DEFAULT))
    registry.register("orders-key", user())
    registry.register("payments-value", user())
    assert registry.list_subjects(prefix="orders-") == ["orders-key", "orders-value"]
    listed = registry.list_schemas(prefix="orders-")
    assert [(v.subject, v.version) for v in listed] == [
        ("orders-key", 1),
        ("orders-value", 1),
        ("orders-value", 2),
    ]
    latest = registry.list_schemas(prefix="orders-v", latest_only=True)
    assert [(v.subject, v.version) for v in latest] == [("orders-value", 2)]
