"""Record formats: how Kafka bytes become column values and back.

``bytes`` passes through, ``string`` is UTF-8, ``json`` is UTF-8 text that must parse as
JSON (kept as a string column so SQL can use ``from_json``/``get_json_object``). ``avro``
is Confluent's wire format through the schema registry (``lockgate.schema_registry.serde``),
shown to the transform as the record's plain JSON text, like ``json``: a source decodes
with the writer schema its id names; a sink encodes with the newest schema registered
under ``<topic>-value``, as Confluent's serializers do with ``use.latest.version``.
Codecs are built inside Spark workers, once per range or write partition.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import fastavro
import fastavro.validation
from fastavro.validation import ValidationError

from lockgate.common.model.pipeline_spec import RecordFormat
from lockgate.schema_registry.serde import (
    AvroSerde,
    RegistryUnavailable,
    RestSchemaFetcher,
    SerdeError,
)


class DecodeFailure(ValueError):
    """The bytes do not match the declared format; the message says why."""


class RecordCodec(Protocol):
    """Converts one side (key or value) of a record between Kafka bytes and a column value."""

    def decode(self, data: bytes | None) -> bytes | str | None:
        """Kafka bytes -> column value; ``DecodeFailure`` if they do not match the format."""
        ...

    def encode(self, value: bytes | str | None) -> bytes | None:
        """Column value -> Kafka bytes; ``DecodeFailure`` if it does not match the format."""
        ...

    @property
    def column_type(self) -> str:
        """Spark SQL type of the column this codec produces (``binary`` or ``string``)."""
        ...


@dataclass(frozen=True)
class BytesCodec:
    """Raw bytes, untouched."""

    @property
    def column_type(self) -> str:
        return "binary"

    def decode(self, data: bytes | None) -> bytes | str | None:
        return data

    def encode(self, value: bytes | str | None) -> bytes | None:
        return value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class StringCodec:
    """UTF-8 text."""

    @property
    def column_type(self) -> str:
        return "string"

    def decode(self, data: bytes | None) -> bytes | str | None:
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeFailure(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc

    def encode(self, value: bytes | str | None) -> bytes | None:
        if value is None or isinstance(value, bytes):
            return value
        return value.encode("utf-8")


@dataclass(frozen=True)
class JsonCodec:
    """UTF-8 JSON text; checked on both sides so no consumer gets half-JSON."""

    @property
    def column_type(self) -> str:
        return "string"

    def decode(self, data: bytes | None) -> bytes | str | None:
        text = StringCodec().decode(data)
        if text is None:
            return None
        try:
            json.loads(text)
        except ValueError as exc:
            raise DecodeFailure(f"not valid JSON: {exc}") from exc
        return text

    def encode(self, value: bytes | str | None) -> bytes | None:
        if value is None:
            return None
        data = value if isinstance(value, bytes) else value.encode("utf-8")
        self.decode(data)
        return data


class SchemaRegistry(Protocol):
    """What the Avro codec asks the registry: a schema by id, the newest of a subject."""

    def __call__(self, schema_id: int) -> str:
        """The schema text of ``schema_id``."""
        ...

    def latest(self, subject: str) -> tuple[int, str]:
        """The id and text of the newest version registered under ``subject``."""
        ...


class AvroCodec:
    """Avro in Confluent's wire format, as the record's JSON text.

    Decoding: a record whose header or body does not match its schema is a bad record
    (``DecodeFailure``); a registry that cannot be reached is not (``RegistryUnavailable``
    propagates and fails the task, so nothing good is dead-lettered). Encoding: the JSON
    text must parse and match the subject's newest schema; bytes and fixed values are
    written in JSON as ISO-8859-1 strings (Avro's own JSON convention), logical types as
    ISO-8601 text (dates, times, timestamps) or decimal strings.
    """

    def __init__(self, registry: SchemaRegistry, *, subject: str | None = None) -> None:
        self._registry = registry
        self._serde = AvroSerde(registry)
        self._subject = subject
        self._writer: tuple[int, Any, dict[str, Any]] | None = None

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
        return json.dumps(record, default=_json_default, separators=(",", ":"))

    def _writer_schema(self) -> tuple[int, Any, dict[str, Any]]:
        if self._writer is None:
            if self._subject is None:
                raise ValueError("an Avro codec that encodes needs the subject to write under")
            schema_id, text = self._registry.latest(self._subject)
            document = json.loads(text)
            self._writer = (
                schema_id,
                fastavro.parse_schema(document, named_schemas={}),
                _named_types(document),
            )
        return self._writer

    def encode(self, value: bytes | str | None) -> bytes | None:
        if value is None:
            return None
        schema_id, parsed, named = self._writer_schema()
        try:
            document = json.loads(value)
        except ValueError as exc:
            raise DecodeFailure(f"not valid JSON: {exc}") from exc
        try:
            datum = _from_json(parsed, document, named)
            fastavro.validation.validate(datum, parsed, raise_errors=True)
        except ValidationError as exc:
            raise DecodeFailure(
                f"does not match schema {schema_id} of subject {self._subject!r}: "
                + "; ".join(str(error) for error in exc.errors)
            ) from exc
        except (ValueError, TypeError, decimal.InvalidOperation) as exc:
            reason = str(exc).strip().replace("\n", " ")
            raise DecodeFailure(
                f"does not match schema {schema_id} of subject {self._subject!r}: {reason}"
            ) from exc
        try:
            return self._serde.encode(schema_id, datum)
        except SerdeError as exc:
            raise DecodeFailure(str(exc)) from exc


def _json_default(value: object) -> object:
    """JSON for what fastavro decodes that json cannot write."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _named_types(document: Any) -> dict[str, Any]:
    """Every named type (record, enum, fixed) of a schema, by full and short name."""
    named: dict[str, Any] = {}

    def walk(node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch, namespace)
        elif isinstance(node, dict):
            if "name" in node and node.get("type") in ("record", "error", "enum", "fixed"):
                name = str(node["name"])
                space = str(node.get("namespace", namespace))
                full = name if "." in name or not space else f"{space}.{name}"
                named[full] = named[name.rsplit(".", 1)[-1]] = node
                namespace = full.rsplit(".", 1)[0] if "." in full else ""
            for child in ("fields", "items", "values"):
                if isinstance(node.get(child), list):
                    for item in node[child]:
                        walk(item.get("type") if isinstance(item, dict) else item, namespace)
                elif child in node:
                    walk(node[child], namespace)
            if isinstance(node.get("type"), dict | list):
                walk(node["type"], namespace)

    walk(document, "")
    return named


_JSON_KINDS: dict[type, tuple[str, ...]] = {
    dict: ("record", "error", "map"),
    list: ("array",),
    str: ("string", "enum", "logical", "bytes", "fixed"),
    bool: ("boolean",),
    int: ("int", "long", "float", "double"),
    float: ("float", "double"),
}


def _type_name(schema: Any, named: dict[str, Any]) -> str:
    if isinstance(schema, str):
        resolved = named.get(schema)
        return str(resolved["type"]) if resolved is not None else schema
    if isinstance(schema, dict):
        if "logicalType" in schema:
            return "logical"
        return _type_name(schema["type"], named) if isinstance(schema["type"], str) else "?"
    return "union"


def _from_json(schema: Any, value: Any, named: dict[str, Any]) -> Any:
    """Turn plain JSON into the Python values fastavro writes for ``schema``."""
    if value is None:
        return None
    if isinstance(schema, str):
        if schema in named:
            return _from_json(named[schema], value, named)
        if schema == "bytes" and isinstance(value, str):
            return value.encode("latin-1")
        return value
    if isinstance(schema, list):
        kinds = _JSON_KINDS.get(type(value), ())
        for kind in kinds:
            for branch in schema:
                if _type_name(branch, named) == kind:
                    return _from_json(branch, value, named)
        return value  # no branch fits: validation names the mismatch
    kind = schema.get("type")
    if not isinstance(kind, str):
        return _from_json(kind, value, named)
    logical = schema.get("logicalType")
    if logical is not None and isinstance(value, str):
        return _logical_from_text(str(logical), value)
    if kind in ("record", "error") and isinstance(value, dict):
        return {
            field["name"]: _from_json(field["type"], value[field["name"]], named)
            for field in schema["fields"]
            if field["name"] in value
        }
    if kind == "array" and isinstance(value, list):
        return [_from_json(schema["items"], item, named) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {k: _from_json(schema["values"], v, named) for k, v in value.items()}
    if kind in ("bytes", "fixed") and isinstance(value, str):
        return value.encode("latin-1")
    if kind in named or kind in ("string", "int", "long", "float", "double", "boolean"):
        return _from_json(kind, value, named)
    return value


def _logical_from_text(logical: str, text: str) -> Any:
    if logical in ("timestamp-millis", "timestamp-micros"):
        return datetime.datetime.fromisoformat(text)
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return datetime.datetime.fromisoformat(text)
    if logical == "date":
        return datetime.date.fromisoformat(text)
    if logical in ("time-millis", "time-micros"):
        return datetime.time.fromisoformat(text)
    if logical == "decimal":
        return decimal.Decimal(text)
    return text


def codec_for(
    record_format: RecordFormat,
    *,
    schema_registry_url: str | None = None,
    subject: str | None = None,
) -> RecordCodec:
    """The codec of a format; ``avro``, ``json_schema`` and ``protobuf`` need the registry's
    URL (and, to encode, the subject whose newest schema they write with)."""
    if record_format is RecordFormat.BYTES:
        return BytesCodec()
    if record_format is RecordFormat.STRING:
        return StringCodec()
    if record_format is RecordFormat.JSON:
        return JsonCodec()
    if not schema_registry_url:
        raise ValueError(f"the {record_format.value} format needs schema_registry_url")
    if record_format is RecordFormat.JSON_SCHEMA:
        # Imported here: that module builds on this one's DecodeFailure.
        from lockgate.executor.dataplane.spark.json_schema_codec import JsonSchemaCodec

        return JsonSchemaCodec(RestSchemaFetcher(schema_registry_url), subject=subject)
    if record_format is RecordFormat.PROTOBUF:
        # Imported here: the protobuf codec's module builds on this one's DecodeFailure.
        from lockgate.executor.dataplane.spark.protobuf_codec import ProtobufCodec
        from lockgate.schema_registry.protobuf_serde import RestProtobufSchemas

        return ProtobufCodec(RestProtobufSchemas(schema_registry_url), subject=subject)
    return AvroCodec(RestSchemaFetcher(schema_registry_url), subject=subject)
