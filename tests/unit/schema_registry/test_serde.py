"""Confluent wire format: framing, schema cache, evolution, pickling."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from lockgate.schema_registry.serde import AvroSerde, SerdeError, frame, unframe

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}


class DictFetcher:
    """Schemas by id from a dict, counting fetches (picklable)."""

    def __init__(self, schemas: dict[int, Any]) -> None:
        self.schemas = {key: json.dumps(value) for key, value in schemas.items()}
        self.calls = 0

    def __call__(self, schema_id: int) -> str:
        self.calls += 1
        try:
            return self.schemas[schema_id]
        except KeyError:
            raise SerdeError(f"schema id {schema_id} unknown") from None


def test_frame_layout_is_confluents() -> None:
    framed = frame(258, b"\x02x")
    assert framed == b"\x00\x00\x00\x01\x02\x02x"
    schema_id, payload = unframe(framed)
    assert schema_id == 258 and bytes(payload) == b"\x02x"


@pytest.mark.parametrize(
    ("data", "message"), [(b"\x00\x00", "shorter"), (b"\x01\x00\x00\x00\x01", "magic byte")]
)
def test_unframe_refuses_foreign_bytes(data: bytes, message: str) -> None:
    with pytest.raises(SerdeError, match=message):
        unframe(data)


def test_round_trip_and_cache() -> None:
    fetcher = DictFetcher({1: V1})
    serde = AvroSerde(fetcher)
    encoded = [serde.encode(1, {"name": f"n{i}"}) for i in range(100)]
    assert [serde.decode(data) for data in encoded] == [{"name": f"n{i}"} for i in range(100)]
    assert fetcher.calls == 1


def test_old_data_read_with_newer_reader() -> None:
    serde_v1 = AvroSerde(DictFetcher({1: V1, 2: V2}))
    old = serde_v1.encode(1, {"name": "ada"})
    new = serde_v1.encode(2, {"name": "bob", "email": "b@x"})
    reader = AvroSerde(DictFetcher({1: V1, 2: V2}), reader_schema=V2)
    assert reader.decode(old) == {"name": "ada", "email": None}
    assert reader.decode(new) == {"name": "bob", "email": "b@x"}


def test_record_not_matching_schema() -> None:
    serde = AvroSerde(DictFetcher({1: V1}))
    with pytest.raises(SerdeError, match="does not match schema 1"):
        serde.encode(1, {"name": 5})


def test_unknown_id_and_truncated_payload() -> None:
    serde = AvroSerde(DictFetcher({1: V1}))
    with pytest.raises(SerdeError, match="unknown"):
        serde.decode(frame(9, b"\x02a"))
    with pytest.raises(SerdeError, match="cannot be decoded"):
        serde.decode(frame(1, b"\x08ab"))


def test_pickles_without_its_caches() -> None:
    serde = AvroSerde(DictFetcher({1: V1, 2: V2}), reader_schema=json.dumps(V2))
    data = serde.encode(1, {"name": "ada"})
    clone = pickle.loads(pickle.dumps(serde))
    assert clone.decode(data) == {"name": "ada", "email": None}
    assert len(pickle.dumps(serde)) < 2000
