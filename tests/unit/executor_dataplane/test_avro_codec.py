"""The avro format's codec: Confluent wire format <-> the record's JSON text.

The registry is a dict here (pure logic); the integration tests run the same codec against
the real registry process inside Spark.
"""

from __future__ import annotations

import datetime
import decimal
import json

import pytest

from lockgate.executor.dataplane.spark.formats import AvroCodec, DecodeFailure
from lockgate.schema_registry.serde import AvroSerde, RegistryUnavailable, SerdeError, frame

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "blob", "type": "bytes"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "parent", "type": ["null", "Order"], "default": None},
    ],
}
OUT = {
    "type": "record",
    "name": "Out",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int", "default": 1},
    ],
}


class DictRegistry:
    """Schemas by id and subjects' newest ids, as the REST facade would answer."""

    def __init__(self) -> None:
        self.schemas = {1: json.dumps(ORDER_V1), 2: json.dumps(OUT)}
        self.subjects = {"out-value": 2}
        self.down = False

    def __call__(self, schema_id: int) -> str:
        if self.down:
            raise RegistryUnavailable("cannot reach the schema registry")
        if schema_id not in self.schemas:
            raise SerdeError(f"schema id {schema_id}: the registry answered 404")
        return self.schemas[schema_id]

    def latest(self, subject: str) -> tuple[int, str]:
        if subject not in self.subjects:
            raise SerdeError(f"no schema under subject {subject!r}")
        schema_id = self.subjects[subject]
        return schema_id, self.schemas[schema_id]


def _order() -> dict[str, object]:
    return {
        "id": 7,
        "item": "lamp",
        "note": None,
        "blob": b"\x00\xff",
        "status": "PAID",
        "tags": ["a", "b"],
        "at": datetime.datetime(2026, 11, 22, 13, 0, tzinfo=datetime.UTC),
        "price": decimal.Decimal("12.50"),
        "parent": None,
    }


def test_decode_gives_plain_json_text() -> None:
    registry = DictRegistry()
    data = AvroSerde(registry).encode(1, _order())
    text = AvroCodec(registry).decode(data)
    assert isinstance(text, str)
    assert json.loads(text) == {
        "id": 7,
        "item": "lamp",
        "note": None,
        "blob": "\u0000\u00ff",
        "status": "PAID",
        "tags": ["a", "b"],
        "at": "2026-11-22T13:00:00+00:00",
        "price": "12.50",
        "parent": None,
    }


def test_json_text_round_trips_through_the_same_schema() -> None:
    registry = DictRegistry()
    registry.subjects["orders-value"] = 1
    codec = AvroCodec(registry, subject="orders-value")
    original = AvroSerde(registry).encode(1, _order())
    text = codec.decode(original)
    assert isinstance(text, str)
    again = codec.encode(text)
    assert again == original
    nested = json.loads(text)
    nested["parent"] = json.loads(text)
    decoded = codec.decode(codec.encode(json.dumps(nested)))
    assert isinstance(decoded, str)
    assert json.loads(decoded)["parent"]["item"] == "lamp"


def test_encode_uses_the_subjects_newest_schema_and_its_defaults() -> None:
    registry = DictRegistry()
    data = AvroCodec(registry, subject="out-value").encode('{"id": 1, "item": "x"}')
    assert data is not None and data[:5] == frame(2, b"")
    assert AvroSerde(registry).decode(data) == {"id": 1, "item": "x", "qty": 1}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x01\x00\x00\x00\x01abc", "magic byte"),
        (b"\x00\x00", "shorter than"),
        (frame(99, b"\x02"), "schema id 99"),
        (frame(2, b"\x02"), "cannot be decoded"),
    ],
)
def test_undecodable_bytes_are_bad_records(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeFailure, match=reason):
        AvroCodec(DictRegistry()).decode(data)


def test_unreachable_registry_is_not_a_bad_record() -> None:
    registry = DictRegistry()
    data = AvroSerde(registry).encode(2, {"id": 1, "item": "x", "qty": 2})
    registry.down = True
    with pytest.raises(RegistryUnavailable):
        AvroCodec(registry).decode(data)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"id": "one", "item": "x"}', "schema 2 of subject 'out-value'"),
        ('{"item": "x"}', "schema 2"),
    ],
)
def test_output_that_does_not_fit_the_schema_is_a_bad_record(text: str, reason: str) -> None:
    with pytest.raises(DecodeFailure, match=reason):
        AvroCodec(DictRegistry(), subject="out-value").encode(text)


def test_encode_without_a_registered_subject_names_it() -> None:
    with pytest.raises(SerdeError, match="missing-value"):
        AvroCodec(DictRegistry(), subject="missing-value").encode('{"id": 1}')
