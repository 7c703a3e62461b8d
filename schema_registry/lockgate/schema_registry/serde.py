"""Confluent wire format for executors: frame, unframe, encode and decode Avro records.

Wire format (what Confluent's ``AvroSerializer`` writes): byte 0 is the magic byte ``0``,
bytes 1-4 the schema id as a big-endian unsigned int, the rest the record in Avro binary
encoding (no container, no schema). Decoding looks the writer schema up by id (cached: an
id never changes meaning) and, when the caller gives a reader schema, resolves the record
into it, so data written with an old version is read with a newer one (Avro schema
resolution: new fields take their defaults, removed ones are skipped).

Runs inside Spark tasks: :class:`AvroSerde` pickles to its URL and reader schema only (caches
and connections are rebuilt lazily in the worker), and the binary codec is fastavro's.

A registry served over HTTPS with ``--auth-tokens`` (the secure local cluster) is reached
with the CA in ``$LOCKGATE_SCHEMA_REGISTRY_CA`` and the bearer token in the file
``$LOCKGATE_SCHEMA_REGISTRY_TOKEN_FILE``, read where the call is made (the executor sets them
and its Spark workers inherit them), so no credential travels in a pipeline spec.
"""

from __future__ import annotations

import io
import json
import os
import ssl
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import fastavro

#: First byte of every framed record.
MAGIC_BYTE = 0
REGISTRY_CA_ENV = "LOCKGATE_SCHEMA_REGISTRY_CA"
REGISTRY_TOKEN_FILE_ENV = "LOCKGATE_SCHEMA_REGISTRY_TOKEN_FILE"
_HEADER = struct.Struct(">bI")
#: Bytes before the Avro payload.
HEADER_SIZE = _HEADER.size

#: Looks a schema's JSON text up by id (the REST facade, the gRPC client, or a test dict).
SchemaFetcher = Callable[[int], str]


class SerdeError(ValueError):
    """A record cannot be framed, unframed, encoded or decoded; the message says why."""


class RegistryUnavailable(SerdeError):
    """The registry could not be asked (unreachable, or a 5xx answer): the record itself may
    be fine, so callers must retry or fail, never treat the record as bad."""


def frame(schema_id: int, payload: bytes) -> bytes:
    """Prefix an Avro payload with the magic byte and the schema id."""
    if not 0 <= schema_id <= 0xFFFFFFFF:
        raise SerdeError(f"schema id {schema_id} does not fit in 4 bytes")
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload


def unframe(data: bytes) -> tuple[int, memoryview]:
    """Split a framed record into its schema id and Avro payload."""
    if len(data) < HEADER_SIZE:
        raise SerdeError(
            f"record is {len(data)} bytes, shorter than the {HEADER_SIZE}-byte Confluent header:"
            " not written by a schema-registry serializer"
        )
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise SerdeError(
            f"record starts with byte {magic}, not the magic byte 0: not in Confluent's wire format"
        )
    return schema_id, memoryview(data)[HEADER_SIZE:]


def _parse(schema: str | dict[str, Any] | list[Any]) -> Any:
    document = json.loads(schema) if isinstance(schema, str) else schema
    # named_schemas isolated per parse so two versions of one record name do not collide.
    return fastavro.parse_schema(document, named_schemas={})


class RestSchemaFetcher:
    """Fetches schema text from the REST facade (``GET /schemas/ids/{id}``); picklable.

    Asks ``format=resolved`` so a schema with references comes with the referenced types
    written out (a reader here knows nothing of references).
    """

    def __init__(self, registry_url: str, *, timeout_s: float = 10.0) -> None:
        self.registry_url = registry_url.rstrip("/")
        self.timeout_s = timeout_s

    def _open(self, request: urllib.request.Request) -> Any:
        """``urlopen`` with the CA and token of the module docstring, when set."""
        token_file = os.environ.get(REGISTRY_TOKEN_FILE_ENV)
        if token_file:
            with open(token_file, encoding="utf-8") as token:
                request.add_header("Authorization", f"Bearer {token.read().strip()}")
        ca = os.environ.get(REGISTRY_CA_ENV)
        context = ssl.create_default_context(cafile=ca) if ca else None
        return urllib.request.urlopen(request, timeout=self.timeout_s, context=context)

    def get_document(self, path: str, *, what: str, not_found: str | None = None) -> Any:
        """GET ``path`` of the REST facade as JSON. A 404 is ``SerdeError(not_found)`` when
        given; unreachable or 5xx is ``RegistryUnavailable``; other answers ``SerdeError``."""
        try:
            with self._open(urllib.request.Request(self.registry_url + path)) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and not_found is not None:
                raise SerdeError(not_found) from None
            error = RegistryUnavailable if exc.code >= 500 else SerdeError
            raise error(
                f"{what}: the registry at {self.registry_url} answered {exc.code}"
            ) from None
        except urllib.error.URLError as exc:
            raise RegistryUnavailable(
                f"cannot reach the schema registry at {self.registry_url}: {exc.reason}"
            ) from None

    def __call__(self, schema_id: int) -> str:
        """The schema text of ``schema_id``; SerdeError if the registry does not know it."""
        return self.typed(schema_id)[1]

    def typed(self, schema_id: int) -> tuple[str, str]:
        """The ``schemaType`` (``AVRO`` when the registry omits it, as Confluent's does) and
        text of ``schema_id``; SerdeError if the registry does not know it."""
        body = self.get_document(
            f"/schemas/ids/{schema_id}?format=resolved", what=f"schema id {schema_id}"
        )
        return str(body.get("schemaType") or "AVRO"), str(body["schema"])

    def latest(self, subject: str) -> tuple[int, str]:
        """The id and text of the newest version under ``subject``; SerdeError if none."""
        schema_id, _, text = self.latest_typed(subject)
        return schema_id, text

    def latest_typed(self, subject: str) -> tuple[int, str, str]:
        """The id, ``schemaType`` and text of the newest version under ``subject``;
        SerdeError if none."""
        body = self.get_document(
            f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest?format=resolved",
            what=f"subject {subject!r}",
            not_found=(
                f"the schema registry at {self.registry_url} has no schema under subject"
                f" {subject!r}: register the output schema first, e.g."
                f" `lockgate schema register {subject} schema.avsc`"
            ),
        )
        return int(body["id"]), str(body.get("schemaType") or "AVRO"), str(body["schema"])

    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` under ``subject`` (idempotent) and return its id."""
        url = f"{self.registry_url}/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        request = urllib.request.Request(
            url,
            data=json.dumps({"schema": schema}).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
            method="POST",
        )
        try:
            with self._open(request) as response:
                return int(json.loads(response.read())["id"])
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise SerdeError(
                f"registering under {subject!r} failed ({exc.code}): {detail}"
            ) from None


class AvroSerde:
    """Encode and decode records in Confluent's wire format with a schema cache by id.

    ``reader_schema``: when set, every decoded record is resolved into it (read old data with
    the newest schema). ``fetch``: where writer schemas come from; must be picklable to ship
    the serde to Spark tasks (:class:`RestSchemaFetcher` is).
    """

    def __init__(
        self,
        fetch: SchemaFetcher,
        *,
        reader_schema: str | Mapping[str, Any] | None = None,
    ) -> None:
        self._fetch = fetch
        self._reader_text = (
            None
            if reader_schema is None
            else reader_schema
            if isinstance(reader_schema, str)
            else json.dumps(reader_schema)
        )
        self._writers: dict[int, Any] = {}
        self._reader: Any = None if self._reader_text is None else _parse(self._reader_text)

    @classmethod
    def for_registry(
        cls, registry_url: str, *, reader_schema: str | Mapping[str, Any] | None = None
    ) -> AvroSerde:
        """A serde reading writer schemas from the REST facade at ``registry_url``."""
        return cls(RestSchemaFetcher(registry_url), reader_schema=reader_schema)

    def __getstate__(self) -> dict[str, Any]:
        # Parsed schemas are rebuilt in the worker: cheap, and they do not all pickle.
        return {"fetch": self._fetch, "reader_text": self._reader_text}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._fetch = state["fetch"]
        self._reader_text = state["reader_text"]
        self._writers = {}
        self._reader = None if self._reader_text is None else _parse(self._reader_text)

    def writer_schema(self, schema_id: int) -> Any:
        """The parsed schema of ``schema_id`` (fetched once, then cached)."""
        parsed = self._writers.get(schema_id)
        if parsed is None:
            parsed = _parse(self._fetch(schema_id))
            self._writers[schema_id] = parsed
        return parsed

    def encode(self, schema_id: int, record: Any) -> bytes:
        """Frame ``record`` written with the schema ``schema_id``."""
        buffer = io.BytesIO()
        buffer.write(_HEADER.pack(MAGIC_BYTE, schema_id))
        try:
            fastavro.schemaless_writer(buffer, self.writer_schema(schema_id), record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerdeError(f"record does not match schema {schema_id}: {exc}") from None
        return buffer.getvalue()

    def decode(self, data: bytes) -> Any:
        """Decode a framed record (into the reader schema when one was given)."""
        schema_id, payload = unframe(data)
        writer = self.writer_schema(schema_id)
        try:
            return fastavro.schemaless_reader(
                io.BytesIO(payload), writer, self._reader if self._reader is not None else writer
            )
        except Exception as exc:  # fastavro raises SchemaResolutionError, EOFError, ValueError..
            raise SerdeError(
                f"record written with schema {schema_id} cannot be decoded: {exc}"
            ) from None
