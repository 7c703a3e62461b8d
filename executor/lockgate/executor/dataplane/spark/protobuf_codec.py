"""The ``protobuf`` record format: Confluent's Protobuf wire format <-> the record's JSON text.

As ``avro``: a source decodes each record with the writer schema its id names (and the
message its message indexes name) and shows the transform the record's proto3 JSON text
(field names as written in the schema; 64-bit integers as strings, as proto3 JSON writes
them); a sink encodes JSON text as the *first* message of the newest schema registered under
``<topic>-value`` (message index ``[0]``), as Confluent's serializer writes that message.
"""

from __future__ import annotations

import json

from lockgate.executor.dataplane.spark.formats import DecodeFailure
from lockgate.schema_registry.protobuf_serde import ProtobufSchemas, ProtobufSerde
from lockgate.schema_registry.serde import RegistryUnavailable, SerdeError


class ProtobufCodec:
    """Protobuf in Confluent's wire format, as the record's JSON text.

    A record that does not decode (or JSON that does not fit the message) is a bad record
    (``DecodeFailure``); a registry that cannot be reached is not (``RegistryUnavailable``
    propagates and fails the task, so nothing good is dead-lettered).
    """

    def __init__(self, schemas: ProtobufSchemas, *, subject: str | None = None) -> None:
        self._schemas = schemas
        self._serde = ProtobufSerde(schemas)
        self._subject = subject
        self._writer_id: int | None = None

    @property
    def column_type(self) -> str:
        return "string"

    def decode(self, data: bytes | None) -> bytes | str | None:
        if data is None:
            return None
        try:
            record = self._serde.decode(data)
        except RegistryUnavailable:
            raise
        except SerdeError as exc:
            raise DecodeFailure(str(exc)) from exc
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False)

    def _writer(self) -> int:
        if self._writer_id is None:
            if self._subject is None:
                raise ValueError("a protobuf codec that encodes needs the subject to write under")
            schema_id, model = self._schemas.latest(self._subject)
            self._serde.remember(schema_id, model)
            self._writer_id = schema_id
        return self._writer_id

    def encode(self, value: bytes | str | None) -> bytes | None:
        if value is None:
            return None
        schema_id = self._writer()
        try:
            text = value.decode("utf-8") if isinstance(value, bytes) else value
            return self._serde.encode(schema_id, text)
        except RegistryUnavailable:
            raise
        except UnicodeDecodeError as exc:
            raise DecodeFailure(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
        except SerdeError as exc:
            raise DecodeFailure(f"{exc} (subject {self._subject!r})") from exc
