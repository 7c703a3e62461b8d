"""The json_schema format's codec: Confluent's JSON Schema wire format <-> JSON text.

The registry is a dict here (pure logic); the integration tests run the same codec against
the real registry process inside Spark, with confluent-kafka's own serializers.
"""

from __future__ import annotations

import json
import struct

import pytest

from lockgate.common.model.pipeline_spec import RecordFormat
from lockgate.executor.dataplane.spark.formats import DecodeFailure, codec_for
from lockgate.executor.dataplane.spark.json_schema_codec import JsonSchemaCodec
from lockgate.schema_registry.serde import RegistryUnavailable, SerdeError

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "qty": {"type": "integer", "minimum": 1},
        "lines": {"type": "array", "items": {"type": "object", "required": ["sku"]}},
    },
    "required": ["id", "item"],
}
AVRO = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


class DictRegistry:
    """Schemas by id and subjects' newest ids, as the REST facade would answer."""

    def __init__(self) -> None:
        self.schemas = {7: ("JSON", json.dumps(ORDER)), 8: ("AVRO", json.dumps(AVRO))}
        self.subjects = {"out-value": 7, "avro-out-value": 8}
        self.lookups: list[int] = []
        self.down = False

    def typed(self, schema_id: int) -> tuple[str, str]:
        self.lookups.append(schema_id)
        if self.down:
            raise RegistryUnavailable("cannot reach the schema registry")
        if schema_id not in self.schemas:
            raise SerdeError(f"schema id {schema_id}: the registry answered 404")
        return self.schemas[schema_id]

    def latest_typed(self, subject: str) -> tuple[int, str, str]:
        schema_id = self.subjects[subject]
        schema_type, text = self.schemas[schema_id]
        return schema_id, schema_type, text


def framed(schema_id: int, document: object) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + json.dumps(document).encode()


def test_decode_gives_the_json_text_of_a_valid_record_and_fetches_its_schema_once() -> None:
    registry = DictRegistry()
    codec = JsonSchemaCodec(registry)
    record = {"id": 1, "item": "book", "note": "é"}
    assert json.loads(str(codec.decode(framed(7, record)))) == record
    assert codec.decode(framed(7, {"id": 2, "item": "pen"})) is not None
    assert registry.lookups == [7]
    assert codec.decode(None) is None
    assert codec.column_type == "string"


def test_encode_writes_confluents_wire_format_with_the_subjects_newest_id() -> None:
    codec = JsonSchemaCodec(DictRegistry(), subject="out-value")
    data = codec.encode('{"id": 3, "item": "cup"}')
    assert data is not None
    assert data[0] == 0
    assert struct.unpack(">I", data[1:5]) == (7,)
    assert json.loads(data[5:].decode("utf-8")) == {"id": 3, "item": "cup"}
    assert codec.encode(None) is None


def test_a_record_without_the_magic_byte_is_a_bad_record() -> None:
    codec = JsonSchemaCodec(DictRegistry())
    with pytest.raises(DecodeFailure, match="not the magic byte 0"):
        codec.decode(b'{"id": 1, "item": "plain json"}')
    with pytest.raises(DecodeFailure, match="shorter than the 5-byte Confluent header"):
        codec.decode(b"\x00\x01")


def test_an_unknown_schema_id_is_a_bad_record_and_an_unreachable_registry_is_not() -> None:
    registry = DictRegistry()
    codec = JsonSchemaCodec(registry)
    with pytest.raises(DecodeFailure, match="schema id 99"):
        codec.decode(framed(99, {"id": 1, "item": "x"}))
    registry.down = True
    with pytest.raises(RegistryUnavailable):
        codec.decode(framed(7, {"id": 1, "item": "x"}))


def test_a_record_framed_with_an_avro_schema_id_is_a_bad_record() -> None:
    with pytest.raises(DecodeFailure, match="schema id 8 is of type AVRO, not a JSON Schema"):
        JsonSchemaCodec(DictRegistry()).decode(framed(8, {"id": 1}))


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ({"id": "one", "item": "x"}, r"at \$\.id: 'one' is not of type 'integer'"),
        ({"id": 1}, r"at \$: 'item' is a required property"),
        ({"id": 1, "item": "x", "qty": 0}, r"at \$\.qty: 0 is less than the minimum of 1"),
        ({"id": 1, "item": "x", "lines": [{}]}, r"at \$\.lines\[0\]: 'sku' is a required"),
    ],
)
def test_an_invalid_document_is_a_bad_record_naming_the_json_path(
    document: object, reason: str
) -> None:
    with pytest.raises(DecodeFailure, match=rf"does not match JSON Schema 7: {reason}"):
        JsonSchemaCodec(DictRegistry()).decode(framed(7, document))
    with pytest.raises(DecodeFailure, match=rf"does not match JSON Schema 7: {reason}"):
        JsonSchemaCodec(DictRegistry(), subject="out-value").encode(json.dumps(document))


def test_a_body_that_is_not_json_is_a_bad_record() -> None:
    with pytest.raises(DecodeFailure, match="not valid JSON"):
        JsonSchemaCodec(DictRegistry()).decode(b"\x00\x00\x00\x00\x07{nope")
    with pytest.raises(DecodeFailure, match="not valid UTF-8"):
        JsonSchemaCodec(DictRegistry()).decode(b"\x00\x00\x00\x00\x07\xff")
    with pytest.raises(DecodeFailure, match="not valid JSON"):
        JsonSchemaCodec(DictRegistry(), subject="out-value").encode("{nope")


def test_writing_under_a_subject_whose_newest_schema_is_not_json_schema_fails_the_batch() -> None:
    codec = JsonSchemaCodec(DictRegistry(), subject="avro-out-value")
    with pytest.raises(SerdeError, match="is AVRO, not a JSON Schema") as raised:
        codec.encode('{"id": 1}')
    assert not isinstance(raised.value, DecodeFailure)


def test_codec_for_selects_the_json_schema_codec() -> None:
    with pytest.raises(ValueError, match="json_schema format needs schema_registry_url"):
        codec_for(RecordFormat.JSON_SCHEMA)
    codec = codec_for(RecordFormat.JSON_SCHEMA, schema_registry_url="http://127.0.0.1:8081")
    assert isinstance(codec, JsonSchemaCodec)


def test_a_document_with_many_errors_names_the_first_few_and_counts_the_rest() -> None:
    lines = [{} for _ in range(5)]
    with pytest.raises(DecodeFailure) as raised:
        JsonSchemaCodec(DictRegistry()).decode(framed(7, {"id": 1, "item": "x", "lines": lines}))
    message = str(raised.value)
    assert message.count("'sku' is a required property") == 3
    assert message.endswith("(and 2 more)")
