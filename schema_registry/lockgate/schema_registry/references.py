"""Schema references: the named types a schema takes from other subjects' versions.

Confluent's rules, as ``AbstractSchemaProvider.resolveReferences`` implements them
(confluentinc/schema-registry, ``client/src/main/java/io/confluent/kafka/schemaregistry/
AbstractSchemaProvider.java``):

- every reference has a name, a subject and a version; version -1 means the subject's latest
  version, and the reference is stored with the number it meant;
- a reference to a subject/version that does not exist makes the schema invalid: the provider
  throws "No schema reference found for subject ... and version ...", which
  ``KafkaSchemaRegistry`` answers as 42201 (invalid schema);
- a new schema may not reference a soft-deleted version; a stored one still resolves through
  one (``lookupDeletedSchema = !isNew``);
- the references of a referenced schema are resolved first (depth first), each version once.

A schema's references are part of its identity (the same text with other references is
another schema with another id), so the fingerprint covers both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lockgate.schema_registry.errors import InvalidSchemaError, RegistryError
from lockgate.schema_registry.model import (
    SchemaReference,
    Subject,
    SubjectVersion,
    Version,
    parse_subject,
    parse_version,
)

#: Deepest chain of references followed before the schema is refused (a cycle ends here too).
MAX_REFERENCE_DEPTH = 32
#: Most references one schema may carry.
MAX_REFERENCES = 1000

#: ``fetch(subject, version or None for latest, include_deleted)``: the version, or None.
VersionFetch = Callable[[Subject, Version | None, bool], SubjectVersion | None]


@dataclass(frozen=True)
class ReferenceRequest:
    """A reference as a caller sent it: the version may still be "latest" (None)."""

    name: str
    subject: Subject
    version: Version | None


@dataclass(frozen=True)
class ResolvedReferences:
    """A schema's references with their versions pinned, and the schemas they lead to."""

    #: The schema's own references, in the caller's order, versions as numbers.
    references: tuple[SchemaReference, ...]
    #: ``(reference name, schema text)`` of every version reached, dependencies before
    #: dependants, each version once (Avro needs the texts, JSON Schema the names too).
    named_texts: tuple[tuple[str, str], ...]

    @property
    def texts(self) -> tuple[str, ...]:
        """The referenced schema texts, dependencies first."""
        return tuple(text for _, text in self.named_texts)


def parse_reference(
    position: int, name: object, subject: object, version: object
) -> ReferenceRequest:
    """Validate one reference sent by a caller; raise 42201 naming the reference and the fix."""
    where = f"reference #{position + 1}"
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchemaError(
            f"Invalid schema reference: {where} has no 'name' (the referenced type's full name)",
            field="references",
        )
    if not isinstance(subject, str):
        raise InvalidSchemaError(
            f"Invalid schema reference: {where} ({name}) has no 'subject'", field="references"
        )
    if isinstance(version, bool) or not isinstance(version, int | str):
        raise InvalidSchemaError(
            f"Invalid schema reference: {where} ({name}) has no 'version' (a number, or -1 for"
            " the latest)",
            field="references",
        )
    try:
        return ReferenceRequest(name, parse_subject(subject), parse_version(version))
    except RegistryError as exc:
        raise InvalidSchemaError(
            f"Invalid schema reference: {where} ({name}): {exc.message}", field="references"
        ) from None


def pinned(references: Sequence[SchemaReference]) -> tuple[ReferenceRequest, ...]:
    """Stored references as requests (their versions are already numbers)."""
    return tuple(ReferenceRequest(ref.name, ref.subject, ref.version) for ref in references)


def resolve_references(
    requested: Sequence[ReferenceRequest], fetch: VersionFetch, *, new_schema: bool
) -> ResolvedReferences:
    """Pin each reference's version and collect the schemas it leads to; 42201 if one is missing."""
    if len(requested) > MAX_REFERENCES:
        raise InvalidSchemaError(
            f"Invalid schema: {len(requested)} references; the limit is {MAX_REFERENCES}",
            field="references",
        )
    texts: list[tuple[str, str]] = []
    seen: set[tuple[Subject, Version]] = set()
    own: list[SchemaReference] = []
    for request in requested:
        found = _follow(request, fetch, include_deleted=not new_schema, texts=texts, seen=seen)
        own.append(SchemaReference(request.name, request.subject, found.version))
    return ResolvedReferences(references=tuple(own), named_texts=tuple(texts))


def _follow(
    request: ReferenceRequest,
    fetch: VersionFetch,
    *,
    include_deleted: bool,
    texts: list[tuple[str, str]],
    seen: set[tuple[Subject, Version]],
    depth: int = 0,
) -> SubjectVersion:
    if depth >= MAX_REFERENCE_DEPTH:
        raise InvalidSchemaError(
            f"Invalid schema: references nest deeper than {MAX_REFERENCE_DEPTH} levels at"
            f" {request.name} (subject {request.subject!r}); is there a cycle?",
            field="references",
        )
    found = fetch(request.subject, request.version, include_deleted)
    if found is None:
        version = "latest" if request.version is None else str(request.version)
        raise InvalidSchemaError(
            f"Invalid schema: no schema reference found for subject {request.subject!r} and"
            f" version {version} (reference {request.name}); register it first",
            field="references",
        )
    key = (found.subject, found.version)
    if key not in seen:
        seen.add(key)
        for inner in found.references:
            _follow(
                ReferenceRequest(inner.name, inner.subject, inner.version),
                fetch,
                include_deleted=True,
                texts=texts,
                seen=seen,
                depth=depth + 1,
            )
        texts.append((request.name, found.schema_text))
    return found


def fingerprint_with_references(fingerprint: str, references: Sequence[SchemaReference]) -> str:
    """The schema's identity: its text's fingerprint, and its references when it has any.

    Without references the text's fingerprint is returned as is, so schemas registered before
    references existed keep their identity.
    """
    if not references:
        return fingerprint
    pinned_refs = [[ref.name, ref.subject, int(ref.version)] for ref in references]
    payload = json.dumps([fingerprint, pinned_refs], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
