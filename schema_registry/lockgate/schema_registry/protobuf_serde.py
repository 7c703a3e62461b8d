"""Confluent's Protobuf wire format for executors: records <-> their proto3 JSON.

Wire format (what Confluent's ``ProtobufSerializer`` writes): the magic byte ``0``, the schema
id (4 bytes, big-endian), the *message indexes* (which message of the schema's file, as a
path through nested messages: a zigzag varint count, then each index as a zigzag varint; the
common ``[0]``, the file's first message, is written as a single ``0``), then the message's
Protobuf bytes.

Schemas come from the REST facade as base64 ``FileDescriptorProto`` (``format=serialized``)
with their references (the imported files) fetched the same way, compiled into a private
descriptor pool per schema id; message classes are built from it with
``google.protobuf.message_factory``, and records are read and written as proto3 JSON
(``json_format``, field names as written in the schema).

Runs inside Spark tasks: :class:`ProtobufSerde` pickles to its schema source only.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from typing import Any, Protocol

from google.protobuf import descriptor, json_format, message_factory
from google.protobuf.message import DecodeError, Message

from lockgate.schema_registry.errors import InvalidSchemaError
from lockgate.schema_registry.protobuf_schema import ProtobufModel, parse_protobuf_schema
from lockgate.schema_registry.serde import RestSchemaFetcher, SerdeError, frame, unframe

#: Largest schema the serde accepts from the registry (the registry's own default cap).
_MAX_SCHEMA_BYTES = 16 * 1024 * 1024
#: Most message indexes (nesting depth) read from a record's header.
_MAX_INDEXES = 100


class ProtobufSchemas(Protocol):
    """Where the serde gets compiled schemas: by id, and a subject's newest."""

    def model(self, schema_id: int) -> ProtobufModel:
        """The compiled schema of ``schema_id`` (SerdeError if the registry does not know it)."""
        ...

    def latest(self, subject: str) -> tuple[int, ProtobufModel]:
        """The id and compiled schema of the newest version under ``subject``."""
        ...


class RestProtobufSchemas:
    """Compiled Protobuf schemas from the REST facade (``format=serialized``); picklable."""

    def __init__(self, registry_url: str) -> None:
        self._rest = RestSchemaFetcher(registry_url)

    def model(self, schema_id: int) -> ProtobufModel:
        body = self._rest.get_document(
            f"/schemas/ids/{schema_id}?format=serialized", what=f"schema id {schema_id}"
        )
        return self._compile(body, f"schema id {schema_id}")

    def latest(self, subject: str) -> tuple[int, ProtobufModel]:
        body = self._rest.get_document(
            f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest?format=serialized",
            what=f"subject {subject!r}",
            not_found=(
                f"the schema registry at {self._rest.registry_url} has no schema under subject"
                f" {subject!r}: register the output schema first (schemaType PROTOBUF)"
            ),
        )
        if body.get("schemaType") != "PROTOBUF":
            raise SerdeError(
                f"the newest schema under {subject!r} is {body.get('schemaType', 'AVRO')}, not"
                " PROTOBUF: register a Protobuf schema there or use another format"
            )
        return int(body["id"]), self._compile(body, f"subject {subject!r}")

    def _compile(self, body: dict[str, Any], what: str) -> ProtobufModel:
        referenced: list[tuple[str, str]] = []
        self._collect(body.get("references") or [], referenced, seen=set())
        try:
            return parse_protobuf_schema(
                str(body["schema"]), max_bytes=_MAX_SCHEMA_BYTES, referenced=referenced
            ).model
        except InvalidSchemaError as exc:
            raise SerdeError(
                f"{what}: the registry's schema does not compile: {exc.message}"
            ) from None

    def _collect(
        self, references: Sequence[dict[str, Any]], out: list[tuple[str, str]], seen: set[str]
    ) -> None:
        """The referenced files, their own references first, each once."""
        for reference in references:
            name = str(reference["name"])
            if name in seen:
                continue
            seen.add(name)
            subject = urllib.parse.quote(str(reference["subject"]), safe="")
            body = self._rest.get_document(
                f"/subjects/{subject}/versions/{int(reference['version'])}"
                "?format=serialized&deleted=true",
                what=f"reference {name}",
            )
            self._collect(body.get("references") or [], out, seen)
            out.append((name, str(body["schema"])))


class ProtobufSerde:
    """Encode and decode Protobuf records in Confluent's wire format, as proto3 JSON."""

    def __init__(self, schemas: ProtobufSchemas) -> None:
        self._schemas = schemas
        self._classes: dict[tuple[int, tuple[int, ...]], type[Message]] = {}
        self._models: dict[int, ProtobufModel] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"schemas": self._schemas}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Classes and compiled schemas are rebuilt in the worker.
        self._schemas = state["schemas"]
        self._classes = {}
        self._models = {}

    def remember(self, schema_id: int, model: ProtobufModel) -> None:
        """Use ``model`` for ``schema_id`` without asking the registry."""
        self._models[schema_id] = model

    def message_class(self, schema_id: int, indexes: Sequence[int]) -> type[Message]:
        """The class of the message ``indexes`` names in the schema ``schema_id``."""
        key = (schema_id, tuple(indexes))
        found = self._classes.get(key)
        if found is None:
            model = self._models.get(schema_id)
            if model is None:
                model = self._models[schema_id] = self._schemas.model(schema_id)
            found = message_factory.GetMessageClass(_message_at(model, indexes, schema_id))
            self._classes[key] = found
        return found

    def decode(self, data: bytes) -> dict[str, Any]:
        """A framed record as its proto3 JSON object (SerdeError when it does not decode)."""
        schema_id, payload = unframe(data)
        indexes, body = read_message_indexes(payload)
        message = self.message_class(schema_id, indexes)()
        try:
            message.ParseFromString(bytes(body))
        except DecodeError as exc:
            raise SerdeError(
                f"record written with schema {schema_id} cannot be decoded: {exc}"
            ) from None
        return json_format.MessageToDict(message, preserving_proto_field_name=True)

    def encode(self, schema_id: int, record: str | dict[str, Any]) -> bytes:
        """Frame ``record`` (proto3 JSON) as the first message of the schema ``schema_id``."""
        message = self.message_class(schema_id, [0])()
        try:
            if isinstance(record, str):
                json_format.Parse(record, message)
            else:
                json_format.ParseDict(record, message)
        except (json_format.ParseError, json.JSONDecodeError) as exc:
            raise SerdeError(
                f"record does not match message {message.DESCRIPTOR.full_name} of schema"
                f" {schema_id}: {exc}"
            ) from None
        return frame(schema_id, write_message_indexes([0]) + message.SerializeToString())


def _message_at(
    model: ProtobufModel, indexes: Sequence[int], schema_id: int
) -> descriptor.Descriptor:
    """The message a path of indexes names: top-level message, then nested ones."""
    pool = model.pool()
    candidates = list(model.file.message_type)
    path = model.file.package
    for depth, index in enumerate(indexes):
        if not 0 <= index < len(candidates):
            raise SerdeError(
                f"record names message index {list(indexes)} of schema {schema_id}, which has"
                f" {len(candidates)} message(s) at depth {depth}"
            )
        chosen = candidates[index]
        path = f"{path}.{chosen.name}" if path else chosen.name
        candidates = list(chosen.nested_type)
    if not indexes:
        raise SerdeError(f"record of schema {schema_id} names no message")
    return pool.FindMessageTypeByName(path)


def write_message_indexes(indexes: Sequence[int]) -> bytes:
    """Confluent's message-index prefix: ``[0]`` as a single 0, else count then indexes."""
    if list(indexes) == [0]:
        return b"\x00"
    return b"".join(_zigzag_varint(value) for value in (len(indexes), *indexes))


def read_message_indexes(payload: memoryview) -> tuple[list[int], memoryview]:
    """The message indexes at the start of ``payload`` and the message bytes after them."""
    count, offset = _read_zigzag(payload, 0)
    if count == 0:
        return [0], payload[offset:]
    if not 0 < count <= _MAX_INDEXES:
        raise SerdeError(f"record's message-index count {count} is not a valid count")
    indexes = []
    for _ in range(count):
        value, offset = _read_zigzag(payload, offset)
        indexes.append(value)
    return indexes, payload[offset:]


def _zigzag_varint(value: int) -> bytes:
    """A non-negative int as a zigzag varint (indexes and counts are never negative)."""
    encoded = value << 1
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_zigzag(payload: memoryview, offset: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 64, 7):
        if offset >= len(payload):
            raise SerdeError("record ends inside its message-index header")
        byte = payload[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), offset
    raise SerdeError("record's message-index header has a varint longer than 10 bytes")
