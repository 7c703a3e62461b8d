"""The schema formats the registry serves: per ``schemaType``, one parser and one rule set.

Everything above this module (registry, REST, gRPC) handles a schema as a
:class:`FormatSchema`: its normalised text, fingerprint and the parsed model the format's
compatibility rules walk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.schema_registry import compatibility, json_compatibility, protobuf_compatibility
from lockgate.schema_registry.avro_schema import parse_schema
from lockgate.schema_registry.errors import InvalidSchemaError
from lockgate.schema_registry.json_schema import parse_json_schema
from lockgate.schema_registry.model import SCHEMA_TYPE_AVRO, SCHEMA_TYPE_JSON, SCHEMA_TYPE_PROTOBUF
from lockgate.schema_registry.protobuf_schema import parse_protobuf_schema

#: The ``schemaType`` names served, as ``GET /schemas/types`` lists them.
SCHEMA_TYPES = (SCHEMA_TYPE_AVRO, SCHEMA_TYPE_JSON, SCHEMA_TYPE_PROTOBUF)


@dataclass(frozen=True)
class FormatSchema:
    """A validated schema of any format."""

    schema_type: str
    #: What the format's compatibility rules walk (an Avro schema, a JSON Schema model, a
    #: compiled Protobuf file).
    model: Any
    #: The text the registry stores and returns.
    normalized_text: str
    #: Equal for equal schemas (before references are added to the identity).
    fingerprint: str


#: ``incompatibilities(reader, writer)``: the reasons the reader cannot read the writer's data.
Incompatibilities = Callable[[Any, Any], Sequence[Any]]


def check_schema_type(schema_type: str | None) -> str:
    """The canonical type name (nothing means AVRO); 42201 for a type not served."""
    if not schema_type:
        return SCHEMA_TYPE_AVRO
    name = schema_type.strip().upper()
    if name in SCHEMA_TYPES:
        return name
    raise InvalidSchemaError(
        f"Invalid schema: schemaType {schema_type!r} is not supported; this registry serves"
        f" {', '.join(SCHEMA_TYPES)}",
        field="schema_type",
    )


def parse_format(
    schema_type: str,
    text: str,
    *,
    max_bytes: int,
    referenced: Sequence[tuple[str, str]] = (),
    new_schema: bool = True,
) -> FormatSchema:
    """Parse ``text`` as ``schema_type`` (already checked); 42201 saying what is wrong.

    ``new_schema`` False re-reads a stored schema (validated when it was registered).
    """
    if schema_type == SCHEMA_TYPE_JSON:
        parsed_json = parse_json_schema(text, max_bytes=max_bytes, referenced=referenced)
        return FormatSchema(
            SCHEMA_TYPE_JSON,
            parsed_json.model,
            parsed_json.normalized_text,
            parsed_json.fingerprint,
        )
    if schema_type == SCHEMA_TYPE_PROTOBUF:
        parsed_proto = parse_protobuf_schema(text, max_bytes=max_bytes, referenced=referenced)
        return FormatSchema(
            SCHEMA_TYPE_PROTOBUF,
            parsed_proto.model,
            parsed_proto.normalized_text,
            parsed_proto.fingerprint,
        )
    parsed = parse_schema(
        text,
        validate_defaults_too=new_schema,
        max_bytes=max_bytes,
        referenced_texts=[referenced_text for _, referenced_text in referenced],
    )
    return FormatSchema(
        SCHEMA_TYPE_AVRO, parsed.avro_schema, parsed.normalized_text, parsed.fingerprint
    )


def incompatibilities_of(schema_type: str) -> Incompatibilities:
    """The reader/writer rule set of a format."""
    if schema_type == SCHEMA_TYPE_JSON:
        return json_compatibility.reader_writer_incompatibilities
    if schema_type == SCHEMA_TYPE_PROTOBUF:
        return protobuf_compatibility.reader_writer_incompatibilities
    return compatibility.reader_writer_incompatibilities
