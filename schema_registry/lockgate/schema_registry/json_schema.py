"""Parse, validate and normalise JSON Schemas (``schemaType: JSON``).

Validation is ``jsonschema``'s: the schema is checked against the meta-schema of the draft its
``$schema`` names (draft 7 when it names none, as Confluent's default). ``$ref`` to other
subjects resolve through ``referencing``: each reference is a resource registered under its
name (and its own ``$id``), as Confluent registers them.

Normalisation: key order and whitespace do not matter, so the canonical text is the
key-sorted compact JSON, and the fingerprint its SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema
import jsonschema.exceptions
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.validators import validator_for

from lockgate.schema_registry.errors import InvalidSchemaError

if TYPE_CHECKING:
    # The resolver class is not re-exported at the package's top level.
    from referencing._core import Resolver

#: The draft a schema without ``$schema`` is read as (Confluent's default).
DEFAULT_SPECIFICATION = referencing.jsonschema.DRAFT7


@dataclass(frozen=True)
class JsonSchemaModel:
    """A JSON Schema with what its ``$ref`` resolve against (what compatibility walks)."""

    document: Any
    resolver: Resolver[Any]


@dataclass(frozen=True)
class ParsedJsonSchema:
    """A validated JSON Schema with its canonical text and fingerprint."""

    model: JsonSchemaModel
    #: Key-sorted compact JSON; what the registry stores and returns.
    normalized_text: str
    #: SHA-256 (hex) of "JSON " and the canonical text: equal for equal schemas.
    fingerprint: str


def canonical_text(document: Any) -> str:
    """Key-sorted compact JSON: the same schema written twice gives the same text."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_json_schema(
    text: str, *, max_bytes: int, referenced: Sequence[tuple[str, str]] = ()
) -> ParsedJsonSchema:
    """Parse and validate JSON Schema text; raise 42201 saying what is wrong.

    ``referenced`` are the ``(name, schema text)`` pairs of the schema's references (theirs
    included), which its ``$ref`` may name.
    """
    if len(text.encode("utf-8")) > max_bytes:
        raise InvalidSchemaError(
            f"Invalid schema: it is larger than {max_bytes} bytes (raise --max-schema-bytes)",
            field="schema",
        )
    document = _load(text, "the schema")
    specification = _specification(document)
    _check_against_meta_schema(document)
    root = specification.create_resource(document)
    registry: referencing.Registry[Any] = referencing.Registry()
    for name, referenced_text in referenced:
        contents = _load(referenced_text, f"referenced schema {name}")
        resource = referencing.Resource.from_contents(
            contents, default_specification=DEFAULT_SPECIFICATION
        )
        # Under its name, its own $id, and its name read against the root's $id (Confluent
        # registers references at the name resolved against the referencing schema's $id).
        uris = {name, str(resource.id() or name), urllib.parse.urljoin(root.id() or "", name)}
        registry = registry.with_resources((uri, resource) for uri in uris)
    resolver = registry.resolver_with_root(root)
    try:
        refs = list(_refs(document, ""))
        normalized = canonical_text(document)
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply", field="schema") from None
    for path, ref in refs:
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            raise InvalidSchemaError(
                f"Invalid schema: $ref {ref!r} at {path or '/'} does not resolve; a reference"
                " to another subject needs an entry in 'references' with that name",
                field="references",
            ) from None
    return ParsedJsonSchema(
        model=JsonSchemaModel(document=document, resolver=resolver),
        normalized_text=normalized,
        # Prefixed with the type: one fingerprint column serves every format, and a JSON
        # Schema must never share an id with an Avro schema of the same text.
        fingerprint=hashlib.sha256(f"JSON {normalized}".encode()).hexdigest(),
    )


def _load(text: str, what: str) -> Any:
    if not text.strip():
        raise InvalidSchemaError(f"Invalid schema: {what} is empty", field="schema")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchemaError(
            f"Invalid schema: {what} is not JSON ({exc.msg} at line {exc.lineno} column"
            f" {exc.colno})",
            field="schema",
        ) from None
    except RecursionError:
        raise InvalidSchemaError(
            f"Invalid schema: {what} nests too deeply", field="schema"
        ) from None
    if not isinstance(document, dict | bool):
        raise InvalidSchemaError(
            f"Invalid schema: {what} must be a JSON object (or true/false), not"
            f" {type(document).__name__}",
            field="schema",
        )
    return document


def _specification(document: Any) -> referencing.Specification[Any]:
    dialect = document.get("$schema") if isinstance(document, dict) else None
    if dialect is None:
        return DEFAULT_SPECIFICATION
    try:
        return referencing.jsonschema.specification_with(str(dialect))
    except referencing.jsonschema.UnknownDialect:
        raise InvalidSchemaError(
            f"Invalid schema: $schema {dialect!r} is not a JSON Schema draft this registry"
            " knows (drafts 3, 4, 6, 7, 2019-09 and 2020-12)",
            field="schema",
        ) from None


def _check_against_meta_schema(document: Any) -> None:
    validator = validator_for(document, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/" + "/".join(str(part) for part in exc.path)
        raise InvalidSchemaError(
            f"Invalid schema: not a valid JSON Schema at {where}: {exc.message}", field="schema"
        ) from None
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply", field="schema") from None


def _refs(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every ``$ref`` in the document with the path where it stands."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield path, ref
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                yield from _refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _refs(item, f"{path}/{index}")
