"""Record formats: how Kafka bytes become column values and back.

``bytes`` passes through, ``string`` is UTF-8, ``json`` is UTF-8 text that must parse as
JSON (kept as a string column so SQL can use ``from_json``/``get_json_object``). ``avro``
will plug in here through ``lockgate.schema_registry.serde`` (Confluent wire format): it
needs a ``RecordCodec`` built from the registry, which is why the codecs are objects and
not a table of functions. Codecs run inside Spark workers, so they must be picklable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from lockgate.executor.spec import RecordFormat


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


def codec_for(record_format: RecordFormat) -> RecordCodec:
    """The codec of a format. Avro is the schema registry's seam and not available yet."""
    if record_format is RecordFormat.BYTES:
        return BytesCodec()
    if record_format is RecordFormat.STRING:
        return StringCodec()
    if record_format is RecordFormat.JSON:
        return JsonCodec()
    raise NotImplementedError(
        "avro records need lockgate.schema_registry.serde; wire a RecordCodec for it here"
    )
