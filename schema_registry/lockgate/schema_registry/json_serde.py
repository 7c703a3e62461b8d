"""Confluent's JSON Schema wire format for executors: validate, frame and unframe documents.

Wire format (what Confluent's ``JSONSerializer`` writes): byte 0 is the magic byte ``0``,
bytes 1-4 the schema id as a big-endian unsigned int, the rest the JSON document in UTF-8
(:func:`lockgate.schema_registry.serde.frame`, the header Avro uses too). A document is
valid when it validates against the schema of its id (the writer's, on reading) or of the
id it is written with (the subject's newest, on writing, as ``JSONSerializer`` does with
``use.latest.version``), by ``jsonschema`` with the draft the schema's ``$schema`` names
(draft 7 when none, as the registry reads it: :mod:`lockgate.schema_registry.json_schema`).

Schemas are fetched once per id and cached (an id never changes meaning). A ``$ref`` to
another subject (a schema reference) is not resolved here: such a schema cannot be used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import jsonschema.exceptions
import referencing.exceptions
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from lockgate.schema_registry.serde import SerdeError, frame, unframe

#: Looks a schema up by id: its ``schemaType`` (``AVRO``, ``JSON``, ``PROTOBUF``) and text.
TypedSchemaFetcher = Callable[[int], tuple[str, str]]

#: At most this many validation errors are named in one message.
_MAX_REASONS = 3


class JsonSchemaSerde:
    """Validate JSON documents against registry schemas and (un)frame them.

    ``fetch`` gives a schema's type and text by id
    (:meth:`lockgate.schema_registry.serde.RestSchemaFetcher.typed`, or a test's dict). The
    executor builds one inside each Spark task (per range or write partition), so nothing
    of it is pickled.
    """

    def __init__(self, fetch: TypedSchemaFetcher) -> None:
        self._fetch = fetch
        self._validators: dict[int, Validator] = {}

    def validator(self, schema_id: int) -> Validator:
        """The validator of schema ``schema_id`` (fetched once, then cached); SerdeError if
        the id is not a JSON Schema."""
        validator = self._validators.get(schema_id)
        if validator is None:
            schema_type, text = self._fetch(schema_id)
            if schema_type != "JSON":
                raise SerdeError(
                    f"schema id {schema_id} is of type {schema_type}, not a JSON Schema:"
                    " the record was not written by a JSON Schema serializer"
                )
            try:
                document = json.loads(text)
                cls = validator_for(document, default=jsonschema.Draft7Validator)
                cls.check_schema(document)
            except (ValueError, jsonschema.exceptions.SchemaError) as exc:
                raise SerdeError(
                    f"schema id {schema_id} is not a valid JSON Schema: {exc}"
                ) from None
            validator = cls(document)
            self._validators[schema_id] = validator
        return validator

    def check(self, schema_id: int, document: Any) -> None:
        """SerdeError naming each JSON path that does not validate (at most a few) and why."""
        validator = self.validator(schema_id)
        try:
            errors = sorted(validator.iter_errors(document), key=lambda e: e.json_path)
        except referencing.exceptions.Unresolvable as exc:
            raise SerdeError(
                f"schema {schema_id} has a $ref that does not resolve ({exc}): schemas with"
                " references to other subjects cannot be used by a json_schema pipeline"
            ) from None
        except RecursionError:
            raise SerdeError(
                f"document nests too deeply to validate against schema {schema_id}"
            ) from None
        if errors:
            reasons = "; ".join(f"at {e.json_path}: {e.message}" for e in errors[:_MAX_REASONS])
            more = f" (and {len(errors) - _MAX_REASONS} more)" if len(errors) > _MAX_REASONS else ""
            raise SerdeError(f"does not match JSON Schema {schema_id}: {reasons}{more}")

    def decode(self, data: bytes) -> tuple[int, str]:
        """The schema id and the JSON text of a framed record, validated against that id's
        schema; SerdeError if the header, the text or the document is wrong."""
        schema_id, payload = unframe(data)
        try:
            text = bytes(payload).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerdeError(
                f"record body is not valid UTF-8 ({exc.reason} at byte {exc.start})"
            ) from None
        self.check(schema_id, _parse(text))
        return schema_id, text

    def encode(self, schema_id: int, text: str) -> bytes:
        """Frame the JSON ``text`` with ``schema_id`` once it validates against that schema;
        the text is written as given (no re-serialisation)."""
        self.check(schema_id, _parse(text))
        return frame(schema_id, text.encode("utf-8"))


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SerdeError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise SerdeError("not valid JSON: it nests too deeply") from None
