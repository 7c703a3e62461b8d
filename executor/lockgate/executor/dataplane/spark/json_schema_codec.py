"""The ``json_schema`` record format: Confluent's JSON Schema wire format <-> JSON text.

A source decodes a record to its JSON text (a string column, as ``json`` and ``avro`` give
the transform) once the document validates against the writer's schema, the one its id
names. A sink validates the transform's JSON against the newest schema registered under
``<topic>-value`` and writes it with that id, as Confluent's ``JSONSerializer`` does with
``use.latest.version``. The wire format and the validation are
:mod:`lockgate.schema_registry.json_serde`'s; this module maps them onto a record codec:
a record that does not match is a bad record (``DecodeFailure``), a registry that cannot be
reached is not (``RegistryUnavailable`` propagates and fails the batch, so nothing good is
dead-lettered).
"""

from __future__ import annotations

from typing import Protocol

from lockgate.executor.dataplane.spark.formats import DecodeFailure
from lockgate.schema_registry.json_serde import JsonSchemaSerde
from lockgate.schema_registry.serde import RegistryUnavailable, SerdeError


class TypedSchemaRegistry(Protocol):
    """What the codec asks the registry (``RestSchemaFetcher`` answers both)."""

    def typed(self, schema_id: int) -> tuple[str, str]:
        """The ``schemaType`` and text of ``schema_id``."""
        ...

    def latest_typed(self, subject: str) -> tuple[int, str, str]:
        """The id, ``schemaType`` and text of the newest version under ``subject``."""
        ...


class JsonSchemaCodec:
    """JSON Schema in Confluent's wire format, as the record's JSON text."""

    def __init__(self, registry: TypedSchemaRegistry, *, subject: str | None = None) -> None:
        self._registry = registry
        self._serde = JsonSchemaSerde(registry.typed)
        self._subject = subject
        self._writer_id: int | None = None

    @property
    def column_type(self) -> str:
        return "string"

    def decode(self, data: bytes | None) -> bytes | str | None:
        if data is None:
            return None
        try:
            return self._serde.decode(data)[1]
        except RegistryUnavailable:
            raise
        except SerdeError as exc:
            raise DecodeFailure(str(exc)) from exc

    def writer_schema_id(self) -> int:
        """The id values are written with: the subject's newest, looked up once per codec
        (once per write partition). ValueError if it is not a JSON Schema."""
        if self._writer_id is None:
            if self._subject is None:
                raise ValueError(
                    "a json_schema codec that encodes needs the subject to write under"
                )
            schema_id, schema_type, _ = self._registry.latest_typed(self._subject)
            if schema_type != "JSON":
                raise SerdeError(
                    f"the newest schema under subject {self._subject!r} (id {schema_id}) is"
                    f" {schema_type}, not a JSON Schema: register one with schemaType JSON"
                )
            self._writer_id = schema_id
        return self._writer_id

    def encode(self, value: bytes | str | None) -> bytes | None:
        if value is None:
            return None
        schema_id = self.writer_schema_id()
        try:
            text = value.decode("utf-8") if isinstance(value, bytes) else value
        except UnicodeDecodeError as exc:
            raise DecodeFailure(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
        try:
            return self._serde.encode(schema_id, text)
        except RegistryUnavailable:
            raise
        except SerdeError as exc:
            raise DecodeFailure(f"{exc} (subject {self._subject!r})") from exc
