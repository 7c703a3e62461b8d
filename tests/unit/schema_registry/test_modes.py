"""Registry modes (READWRITE, READONLY, IMPORT) on a real SQLite file."""

from __future__ import annotations

import json

import pytest

from lockgate.schema_registry import errors
from lockgate.schema_registry.model import Mode
from lockgate.schema_registry.registry import SchemaRegistry


def record(*fields: str) -> str:
    """An Avro record with optional string fields."""
    return json.dumps(
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": f, "type": "string", "default": ""} for f in fields],
        }
    )


def test_modes_default_to_readwrite_and_fall_back_to_global(registry: SchemaRegistry) -> None:
    assert registry.get_mode(None) is Mode.READWRITE
    with pytest.raises(errors.SubjectModeNotFoundError) as missing:
        registry.get_mode("s")
    assert missing.value.error_code == 40409
    assert registry.get_mode("s", default_to_global=True) is Mode.READWRITE
    registry.set_mode(None, "readonly")
    assert registry.get_mode("s", default_to_global=True) is Mode.READONLY
    registry.set_mode("s", "READWRITE")
    assert registry.get_mode("s") is Mode.READWRITE
    assert registry.delete_mode("s") is Mode.READWRITE
    assert registry.delete_mode(None) is Mode.READONLY
    assert registry.get_mode(None) is Mode.READWRITE


def test_an_unknown_mode_is_42204(registry: SchemaRegistry) -> None:
    with pytest.raises(errors.InvalidModeError) as refused:
        registry.set_mode(None, "READ_SOMETIMES")
    assert refused.value.error_code == 42204
    assert "READWRITE, READONLY, IMPORT" in refused.value.message


def test_readonly_refuses_registrations_and_deletes(registry: SchemaRegistry) -> None:
    registry.register("s", record("a"))
    registry.set_mode("s", "READONLY")
    for write in (
        lambda: registry.register("s", record("a", "b")),
        lambda: registry.delete_version("s", 1),
        lambda: registry.delete_subject("s"),
    ):
        with pytest.raises(errors.OperationNotPermittedError) as refused:
            write()
        assert refused.value.error_code == 42205
        assert "read-only" in refused.value.message
    # Reads and other subjects are unaffected.
    assert registry.lookup("s", record("a")).version == 1
    assert registry.register("other", record("a")).created


def test_import_keeps_ids_and_versions_and_skips_compatibility(registry: SchemaRegistry) -> None:
    registry.set_mode("imported", "IMPORT")
    first = registry.register("imported", record("a"), schema_id=100, version=3)
    assert (first.schema_id, first.version) == (100, 3)
    # Compatibility is not checked in IMPORT (a required field without default would fail).
    breaking = json.dumps({"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]})
    assert registry.register("imported", breaking, schema_id=7, version=4).schema_id == 7
    assert registry.get_schema(100).schema_text == registry.get_version("imported", 3).schema_text
    # An id already holding another schema, or a taken version, is refused.
    with pytest.raises(errors.IdDoesNotMatchError) as taken_id:
        registry.register("imported", record("b"), schema_id=100)
    assert taken_id.value.error_code == 42207
    with pytest.raises(errors.OperationNotPermittedError):
        registry.register("imported", record("c"), schema_id=8, version=3)
    # New ids outside the import keep counting from the highest one.
    registry.set_mode("imported", "READWRITE")
    fresh = registry.register("fresh", record("z"))
    assert fresh.schema_id > 100


def test_ids_are_refused_outside_import_and_import_needs_an_empty_subject(
    registry: SchemaRegistry,
) -> None:
    with pytest.raises(errors.OperationNotPermittedError) as refused:
        registry.register("s", record("a"), schema_id=5)
    assert "not in import mode" in refused.value.message
    registry.register("s", record("a"))
    with pytest.raises(errors.OperationNotPermittedError) as not_empty:
        registry.set_mode("s", "IMPORT")
    assert "force=true" in not_empty.value.message
    with pytest.raises(errors.OperationNotPermittedError):
        registry.set_mode(None, "IMPORT")
    assert registry.set_mode("s", "IMPORT", force=True) is Mode.IMPORT
