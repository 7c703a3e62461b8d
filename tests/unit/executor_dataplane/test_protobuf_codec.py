"""The protobuf format's codec: Confluent's Protobuf wire format <-> the record's JSON text.

The registry is a dict of compiled schemas here (pure logic); the integration test runs the
same codec against the real registry process inside Spark. Records written by
confluent-kafka's own ``ProtobufSerializer`` framing (its message-index encoding) are decoded.
"""

from __future__ import annotations

import io
import json
import pickle

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

from lockgate.executor.dataplane.spark.formats import DecodeFailure
from lockgate.executor.dataplane.spark.protobuf_codec import ProtobufCodec
from lockgate.schema_registry.protobuf_schema import ProtobufModel, parse_protobuf_schema
from lockgate.schema_registry.protobuf_serde import (
    ProtobufSerde,
    read_message_indexes,
    write_message_indexes,
)
from lockgate.schema_registry.serde import RegistryUnavailable, SerdeError, frame

ORDER = """syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  message Line { int32 qty = 1; }
  Line line = 4;
}
message Refund { string reason = 1; }
"""


class DictSchemas:
    """Compiled schemas by id and subjects' newest ids, as the REST facade would answer."""

    def __init__(self) -> None:
        self.models: dict[int, ProtobufModel] = {
            7: parse_protobuf_schema(ORDER, max_bytes=1 << 20).model
        }
        self.subjects = {"out-value": 7}
        self.down = False

    def model(self, schema_id: int) -> ProtobufModel:
        if self.down:
            raise RegistryUnavailable("cannot reach the schema registry")
        if schema_id not in self.models:
            raise SerdeError(f"schema id {schema_id}: the registry answered 404")
        return self.models[schema_id]

    def latest(self, subject: str) -> tuple[int, ProtobufModel]:
        schema_id = self.subjects[subject]
        return schema_id, self.models[schema_id]


def test_json_text_round_trips_through_the_wire_format() -> None:
    codec = ProtobufCodec(DictSchemas(), subject="out-value")
    text = '{"id": "42", "item": "book", "tags": ["a", "b"], "line": {"qty": 3}}'
    data = codec.encode(text)
    assert data is not None
    # Magic byte, schema id 7, the single 0 of message index [0], then the message.
    assert data[:6] == b"\x00\x00\x00\x00\x07\x00"
    assert json.loads(codec.decode(data) or "") == json.loads(text)
    assert codec.decode(None) is None and codec.encode(None) is None


def test_message_indexes_follow_confluents_encoding() -> None:
    assert write_message_indexes([0]) == b"\x00"
    # [1]: count 1, then 1, each zigzag (x2): 0x02 0x02; [0, 0] (a nested first message).
    assert write_message_indexes([1]) == b"\x02\x02"
    assert write_message_indexes([0, 0]) == b"\x04\x00\x00"
    for indexes in ([0], [1], [0, 0], [3, 70]):
        assert read_message_indexes(memoryview(write_message_indexes(indexes) + b"x")) == (
            indexes,
            memoryview(b"x"),
        )


def test_a_record_of_another_message_decodes_by_its_index() -> None:
    serde = ProtobufSerde(DictSchemas())
    refund_class = serde.message_class(7, [1])
    line_class = serde.message_class(7, [0, 0])
    refund = frame(7, write_message_indexes([1]) + refund_class(reason="late").SerializeToString())
    line = frame(7, write_message_indexes([0, 0]) + line_class(qty=2).SerializeToString())
    assert serde.decode(refund) == {"reason": "late"}
    assert serde.decode(line) == {"qty": 2}


def test_confluents_serializer_output_decodes() -> None:
    serde = ProtobufSerde(DictSchemas())
    refund_class = serde.message_class(7, [1])
    # confluent-kafka writes the index array its own way; read it back here.
    header = io.BytesIO()
    ProtobufSerializer._encode_varints(header, [1], zigzag=True)
    data = frame(7, header.getvalue() + refund_class(reason="x").SerializeToString())
    assert serde.decode(data) == {"reason": "x"}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x00\x00\x00\x07\x02\x06", "message index [3] of schema 7"),
        (b"\x00\x00\x00\x00\x07\x00\x0a\xff", "cannot be decoded"),
        (b"\x00\x00\x00\x00\x07", "ends inside its message-index header"),
        (b"\x01\x00\x00\x00\x07\x00", "not the magic byte 0"),
        (b"\x00\x00\x00\x00\x63\x00", "schema id 99"),
    ],
)
def test_a_bad_record_is_a_decode_failure_naming_why(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeFailure, match=reason.replace("[", r"\[").replace("]", r"\]")):
        ProtobufCodec(DictSchemas()).decode(data)


def test_json_that_does_not_fit_the_message_is_a_decode_failure() -> None:
    codec = ProtobufCodec(DictSchemas(), subject="out-value")
    with pytest.raises(DecodeFailure, match=r"shop.Order.*'out-value'"):
        codec.encode('{"id": "x", "nope": 1}')
    with pytest.raises(DecodeFailure, match=r"shop\.Order"):
        codec.encode("{not json")


def test_an_unreachable_registry_is_not_a_bad_record() -> None:
    schemas = DictSchemas()
    schemas.down = True
    with pytest.raises(RegistryUnavailable):
        ProtobufCodec(schemas).decode(b"\x00\x00\x00\x00\x07\x00")


def test_the_serde_pickles_without_its_caches() -> None:
    serde = ProtobufSerde(DictSchemas())
    serde.message_class(7, [0])
    copy = pickle.loads(pickle.dumps(serde))
    data = frame(7, b"\x00" + serde.message_class(7, [0])(item="x").SerializeToString())
    assert copy.decode(data) == {"item": "x"}
