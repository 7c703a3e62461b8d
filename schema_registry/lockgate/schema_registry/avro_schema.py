"""Parse, validate and normalise Avro schemas.

Parsing and name/namespace/enum-symbol validation come from the ``avro`` library. It does not
check that field defaults match their types (Avro 1.12's Python parser accepts
``{"type": "int", "default": "x"}``), so :func:`validate_defaults` fills that gap following the
Avro specification (a union's default matches its *first* branch).

Normalisation: the same schema written with other whitespace, key order, ``{"type": "int"}``
instead of ``"int"``, or a namespace split differently, has one normalised form and therefore
one fingerprint and one global id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import avro.errors
import avro.name
import avro.schema

from lockgate.schema_registry.errors import InvalidSchemaError

#: Default cap on a schema's text, in bytes (``--max-schema-bytes``).
DEFAULT_MAX_SCHEMA_BYTES = 1024 * 1024

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class ParsedSchema:
    """A validated Avro schema with its normalised text and fingerprint."""

    #: The ``avro`` library's parsed schema (used by the compatibility checker).
    avro_schema: avro.schema.Schema
    #: Compact JSON of the parsed schema; what the registry stores and returns.
    normalized_text: str
    #: SHA-256 (hex) of the key-sorted compact JSON: equal for equal schemas.
    fingerprint: str


def parse_schema(
    text: str,
    *,
    validate_defaults_too: bool = True,
    max_bytes: int = DEFAULT_MAX_SCHEMA_BYTES,
    referenced_texts: Sequence[str] = (),
) -> ParsedSchema:
    """Parse and validate Avro schema text; raise 42201 saying what is wrong.

    ``validate_defaults_too`` is True for newly registered schemas; stored schemas were
    validated when they were registered and are parsed again without it.
    ``referenced_texts`` are the schemas of the references, dependencies first: their named
    types are known while ``text`` is parsed, and stay references (names) in its normalised
    text, as Confluent keeps them.
    """
    size = len(text.encode("utf-8")) if len(text) * 4 > max_bytes else len(text)
    if size > max_bytes:
        raise InvalidSchemaError(
            f"Invalid schema: it is {size} bytes; the limit is {max_bytes} bytes"
            " (split it or raise --max-schema-bytes)",
            field="schema",
        )
    if not text.strip():
        raise InvalidSchemaError("Invalid schema: empty schema text", field="schema")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchemaError(
            f"Invalid schema: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            field="schema",
        ) from None
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: JSON nested too deeply", field="schema") from None
    names = _referenced_names(referenced_texts)
    known = dict(names.names)
    try:
        parsed = avro.schema.make_avsc_object(document, names)
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply", field="schema") from None
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchemaError(f"Invalid schema: not valid Avro: {exc}", field="schema") from None
    if validate_defaults_too:
        problems = validate_defaults(parsed)
        if problems:
            raise InvalidSchemaError("Invalid schema: " + "; ".join(problems), field="schema")
    # Types taken from references are written by name, not inlined.
    emit_names = avro.name.Names()
    emit_names.names = known
    as_json = parsed.to_json(emit_names)
    normalized_text = json.dumps(as_json, separators=(",", ":"))
    sorted_text = json.dumps(as_json, separators=(",", ":"), sort_keys=True)
    fingerprint = hashlib.sha256(sorted_text.encode("utf-8")).hexdigest()
    return ParsedSchema(
        avro_schema=parsed, normalized_text=normalized_text, fingerprint=fingerprint
    )


def inline_references(text: str, referenced_texts: Sequence[str]) -> str:
    """The schema with the named types of its references written out in full (Confluent's
    ``format=resolved``): what a reader that knows nothing of references can parse."""
    parsed = parse_schema(
        text, validate_defaults_too=False, max_bytes=2**31, referenced_texts=referenced_texts
    )
    if not referenced_texts:
        return parsed.normalized_text
    return json.dumps(parsed.avro_schema.to_json(), separators=(",", ":"))


def _referenced_names(referenced_texts: Sequence[str]) -> avro.name.Names:
    """The named types the referenced schemas define, parsed in order into one namespace."""
    names = avro.name.Names()
    for position, referenced in enumerate(referenced_texts):
        try:
            avro.schema.make_avsc_object(json.loads(referenced), names)
        except (
            avro.errors.AvroException,
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            RecursionError,
        ) as exc:
            raise InvalidSchemaError(
                f"Invalid schema: referenced schema #{position + 1} does not parse together"
                f" with the others: {exc}",
                field="references",
            ) from None
    return names


def validate_defaults(schema: avro.schema.Schema) -> list[str]:
    """Every field default in ``schema`` that does not match its field's type, described."""
    problems: list[str] = []
    _walk_defaults(schema, schema_path(schema), problems, set())
    return problems


def schema_path(schema: avro.schema.Schema) -> str:
    """The path prefix used in messages: the record's full name, or its type."""
    if isinstance(schema, avro.schema.NamedSchema):
        return str(schema.fullname)
    return str(schema.type)


def _walk_defaults(
    schema: avro.schema.Schema, path: str, problems: list[str], seen: set[str]
) -> None:
    if isinstance(schema, avro.schema.RecordSchema):
        if schema.fullname in seen:
            return
        seen.add(schema.fullname)
        for field in schema.fields:
            field_path = f"{path}.{field.name}"
            if field.has_default:
                reason = default_mismatch(field.type, field.default)
                if reason is not None:
                    problems.append(
                        f"default {json.dumps(field.default)} of field {field_path} does not match"
                        f" its type {_type_name(field.type)}: {reason}"
                    )
            _walk_defaults(field.type, field_path, problems, seen)
    elif isinstance(schema, avro.schema.ArraySchema):
        _walk_defaults(schema.items, f"{path}[]", problems, seen)
    elif isinstance(schema, avro.schema.MapSchema):
        _walk_defaults(schema.values, f"{path}{{}}", problems, seen)
    elif isinstance(schema, avro.schema.UnionSchema):
        for branch in schema.schemas:
            _walk_defaults(branch, f"{path}<{_type_name(branch)}>", problems, seen)


def _type_name(schema: avro.schema.Schema) -> str:
    if isinstance(schema, avro.schema.NamedSchema):
        return f"{schema.type} {schema.fullname}"
    if isinstance(schema, avro.schema.UnionSchema):
        return "[" + ", ".join(_type_name(branch) for branch in schema.schemas) + "]"
    return str(schema.type)


def default_mismatch(schema: avro.schema.Schema, value: Any) -> str | None:
    """Why the JSON ``value`` is not a valid default for ``schema``, or None when it is."""
    kind = schema.type
    if kind == "null":
        return None if value is None else "expected null"
    if kind == "boolean":
        return None if isinstance(value, bool) else "expected true or false"
    if kind in ("int", "long"):
        low, high = _INT_RANGE if kind == "int" else _LONG_RANGE
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer ({kind})"
        return None if low <= value <= high else f"{value} is out of the {kind} range"
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"expected a number ({kind})"
        return None
    if kind in ("string", "bytes"):
        return None if isinstance(value, str) else f"expected a JSON string ({kind})"
    if isinstance(schema, avro.schema.FixedSchema):
        if not isinstance(value, str):
            return "expected a JSON string (fixed)"
        if len(value) != schema.size:
            return (
                f"expected {schema.size} characters for fixed size {schema.size}, got {len(value)}"
            )
        return None
    if isinstance(schema, avro.schema.EnumSchema):
        if not isinstance(value, str) or value not in schema.symbols:
            return f"expected one of the symbols {list(schema.symbols)}"
        return None
    if isinstance(schema, avro.schema.ArraySchema):
        if not isinstance(value, list):
            return "expected a JSON array"
        for index, item in enumerate(value):
            reason = default_mismatch(schema.items, item)
            if reason is not None:
                return f"item {index}: {reason}"
        return None
    if isinstance(schema, avro.schema.MapSchema):
        if not isinstance(value, dict):
            return "expected a JSON object (map)"
        for key, item in value.items():
            reason = default_mismatch(schema.values, item)
            if reason is not None:
                return f"map value {key!r}: {reason}"
        return None
    if isinstance(schema, avro.schema.UnionSchema):
        first = schema.schemas[0]
        reason = default_mismatch(first, value)
        if reason is None:
            return None
        return (
            f"a union's default must match its first branch ({_type_name(first)}): {reason};"
            " reorder the union so the default's type comes first"
        )
    if isinstance(schema, avro.schema.RecordSchema):
        if not isinstance(value, dict):
            return f"expected a JSON object (record {schema.fullname})"
        for field in schema.fields:
            if field.name in value:
                reason = default_mismatch(field.type, value[field.name])
                if reason is not None:
                    return f"field {field.name}: {reason}"
            elif not field.has_default:
                return f"field {field.name} is missing and has no default"
        return None
    return None
