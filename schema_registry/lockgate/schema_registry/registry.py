"""The registry's operations, shared by the REST facade and the gRPC servicer.

Transport-free: takes plain values, returns domain values, raises
:mod:`lockgate.schema_registry.errors`. Schemas are cached by id in memory because a global
id never changes meaning (the rows are never rewritten), which is what makes lookups by id
cheap enough for every consumer of every topic.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lockgate.schema_registry.avro_schema import DEFAULT_MAX_SCHEMA_BYTES, inline_references
from lockgate.schema_registry.compatibility import CompatibilityReport, check_compatibility
from lockgate.schema_registry.errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    OperationNotPermittedError,
    SchemaNotFoundError,
    SubjectModeNotFoundError,
    SubjectNotFoundError,
    VersionNotFoundError,
)
from lockgate.schema_registry.formats import (
    FormatSchema,
    check_schema_type,
    incompatibilities_of,
    parse_format,
)
from lockgate.schema_registry.model import (
    DEFAULT_COMPATIBILITY,
    DEFAULT_MODE,
    SCHEMA_TYPE_AVRO,
    SCHEMA_TYPE_PROTOBUF,
    CompatibilityLevel,
    Mode,
    RegisteredSchema,
    RegistrationResult,
    SchemaId,
    Subject,
    SubjectVersion,
    Version,
    parse_subject,
    parse_version,
)
from lockgate.schema_registry.protobuf_schema import ProtobufModel
from lockgate.schema_registry.references import (
    ReferenceRequest,
    ResolvedReferences,
    fingerprint_with_references,
    pinned,
    resolve_references,
)
from lockgate.schema_registry.store import ImportedIds, SchemaStore

_V = TypeVar("_V")

#: Most schemas kept in the id caches; past it the caches start over (ids stay valid).
MAX_CACHED_SCHEMAS = 100_000


@dataclass(frozen=True)
class Candidate:
    """A schema sent by a caller, parsed with its references resolved."""

    parsed: FormatSchema
    resolved: ResolvedReferences
    #: The identity of text and references together (what a global id stands for).
    fingerprint: str


class SchemaRegistry:
    """Register, look up, check, configure and delete schemas."""

    def __init__(
        self, store: SchemaStore, *, max_schema_bytes: int = DEFAULT_MAX_SCHEMA_BYTES
    ) -> None:
        self._store = store
        self._max_schema_bytes = max_schema_bytes
        self._by_id: dict[SchemaId, RegisteredSchema] = {}
        # Schema id -> the format's parsed model (what compatibility checks walk).
        self._parsed_by_id: dict[SchemaId, Any] = {}
        # Guards only the caches' size resets; dict get/set are atomic under the GIL.
        self._cache_lock = threading.Lock()

    @property
    def store(self) -> SchemaStore:
        """The underlying store."""
        return self._store

    # --- parsing helpers ---------------------------------------------------------------

    def parse(
        self,
        schema_text: str,
        schema_type: str | None = None,
        references: Sequence[ReferenceRequest] = (),
        *,
        new_schema: bool = True,
    ) -> Candidate:
        """Validate a schema sent by a caller (defaults checked, size capped, references
        resolved: ``new_schema`` refuses references to soft-deleted versions)."""
        valid_type = check_schema_type(schema_type)
        if not isinstance(schema_text, str):
            raise InvalidSchemaError(
                "Invalid schema: 'schema' must be a JSON string", field="schema"
            )
        resolved = resolve_references(references, self._fetch_version, new_schema=new_schema)
        parsed = parse_format(
            valid_type,
            schema_text,
            max_bytes=self._max_schema_bytes,
            referenced=resolved.named_texts,
        )
        fingerprint = fingerprint_with_references(parsed.fingerprint, resolved.references)
        return Candidate(parsed=parsed, resolved=resolved, fingerprint=fingerprint)

    def _fetch_version(
        self, subject: Subject, version: Version | None, include_deleted: bool
    ) -> SubjectVersion | None:
        """A version of ``subject`` (None: its newest live one), or None when there is none."""
        versions = self._store.subject_versions(subject=subject, include_deleted=include_deleted)
        if version is None:
            live = [v for v in versions if not v.deleted]
            return live[-1] if live else None
        return next((v for v in versions if v.version == version), None)

    def _parsed(self, version: RegisteredSchema | SubjectVersion) -> Any:
        cached = self._parsed_by_id.get(version.schema_id)
        if cached is None:
            resolved = resolve_references(
                pinned(version.references), self._fetch_version, new_schema=False
            )
            cached = parse_format(
                version.schema_type,
                version.schema_text,
                max_bytes=2**31,
                referenced=resolved.named_texts,
                new_schema=False,
            ).model
            self._remember(self._parsed_by_id, version.schema_id, cached)
        return cached

    def _remember(self, cache: dict[SchemaId, _V], key: SchemaId, value: _V) -> None:
        if len(cache) >= MAX_CACHED_SCHEMAS:
            with self._cache_lock:
                cache.clear()
        cache[key] = value

    # --- schemas by id -----------------------------------------------------------------

    def get_schema(self, schema_id: int) -> RegisteredSchema:
        """The schema with this global id (soft-deleted versions do not hide it)."""
        cached = self._by_id.get(SchemaId(schema_id))
        if cached is not None:
            return cached
        found = self._store.get_schema(schema_id=SchemaId(schema_id))
        if found is None:
            raise SchemaNotFoundError(f"Schema {schema_id} not found", field="id")
        self._remember(self._by_id, SchemaId(schema_id), found)
        return found

    def resolved_text(self, schema: RegisteredSchema | SubjectVersion) -> str:
        """The schema text with its references inlined (``format=resolved``); an Avro schema
        without references, or a JSON Schema, as stored."""
        if not schema.references or schema.schema_type != SCHEMA_TYPE_AVRO:
            return schema.schema_text
        resolved = resolve_references(
            pinned(schema.references), self._fetch_version, new_schema=False
        )
        return inline_references(schema.schema_text, resolved.texts)

    def serialized_text(self, schema: RegisteredSchema | SubjectVersion) -> str:
        """``format=serialized``: a Protobuf schema as a base64 ``FileDescriptorProto``, as
        Confluent answers it; a schema of another format as stored."""
        if schema.schema_type != SCHEMA_TYPE_PROTOBUF:
            return schema.schema_text
        model: ProtobufModel = self._parsed(schema)
        return model.serialized()

    def cached_schema(self, schema_id: int) -> RegisteredSchema | None:
        """The schema if it is already in memory (no database access), else None."""
        return self._by_id.get(SchemaId(schema_id))

    def schema_usages(
        self, schema_id: int, *, include_deleted: bool = False
    ) -> list[tuple[Subject, Version]]:
        """(subject, version) pairs using this schema id; 40403 when the id is unknown."""
        self.get_schema(schema_id)
        return self._store.schema_usages(
            schema_id=SchemaId(schema_id), include_deleted=include_deleted
        )

    # --- registration and lookup -------------------------------------------------------

    def effective_level(self, subject: Subject) -> CompatibilityLevel:
        """The subject's level, else the global one, else BACKWARD."""
        return self._store.effective_config(subject=subject) or DEFAULT_COMPATIBILITY

    def register(
        self,
        subject: str,
        schema_text: str,
        *,
        schema_type: str | None = None,
        references: Sequence[ReferenceRequest] = (),
        schema_id: int | None = None,
        version: int | None = None,
    ) -> RegistrationResult:
        """Register ``schema_text`` under ``subject``; idempotent; 409 with reasons if refused.

        ``schema_id`` and ``version`` are for IMPORT mode only (42205 otherwise), which also
        skips the compatibility check, as Confluent's does.
        """
        valid_subject = parse_subject(subject)
        mode = self.effective_mode(valid_subject)
        imported = self._imported_ids(valid_subject, mode, schema_id, version)
        candidate = self.parse(schema_text, schema_type, references)
        parsed = candidate.parsed
        level = (
            CompatibilityLevel.NONE if mode is Mode.IMPORT else self.effective_level(valid_subject)
        )

        def check(live: Sequence[SubjectVersion]) -> None:
            report = self._report(level, parsed, live)
            if not report.compatible:
                raise IncompatibleSchemaError(
                    "Schema being registered is incompatible with an earlier schema for subject"
                    f' "{valid_subject}", details: [' + "; ".join(report.reasons) + "]",
                    reasons=report.reasons,
                )

        result = self._store.register(
            subject=valid_subject,
            fingerprint=candidate.fingerprint,
            schema_text=parsed.normalized_text,
            schema_type=parsed.schema_type,
            check=check,
            references=candidate.resolved.references,
            imported=imported,
        )
        if result.schema_id not in self._parsed_by_id:
            self._remember(self._parsed_by_id, result.schema_id, parsed.model)
        return result

    @staticmethod
    def _imported_ids(
        subject: Subject, mode: Mode, schema_id: int | None, version: int | None
    ) -> ImportedIds | None:
        """The ids a registration brings, allowed only in IMPORT mode; 42205 when not."""
        if mode is Mode.READONLY:
            raise OperationNotPermittedError(
                f"Subject '{subject}' is in read-only mode: set its mode (or the global one) to"
                " READWRITE to register",
                field="mode",
            )
        if schema_id is None and version is None:
            return None
        if mode is not Mode.IMPORT:
            raise OperationNotPermittedError(
                f"Subject '{subject}' is not in import mode: an id or version may be given only"
                " when the mode is IMPORT",
                field="id" if schema_id is not None else "version",
            )
        if schema_id is None:
            raise OperationNotPermittedError(
                "An import names the schema's id too, not only its version", field="id"
            )
        return ImportedIds(SchemaId(schema_id), None if version is None else Version(version))

    def lookup(
        self,
        subject: str,
        schema_text: str,
        *,
        schema_type: str | None = None,
        references: Sequence[ReferenceRequest] = (),
        include_deleted: bool = False,
    ) -> SubjectVersion:
        """The version of ``subject`` holding this schema (40401 subject, 40403 schema)."""
        valid_subject = parse_subject(subject)
        candidate = self.parse(schema_text, schema_type, references, new_schema=False)
        found = self._store.find_in_subject(
            subject=valid_subject,
            fingerprint=candidate.fingerprint,
            include_deleted=include_deleted,
        )
        if found is not None:
            return found
        if not self._store.subject_versions(subject=valid_subject, include_deleted=include_deleted):
            raise SubjectNotFoundError(f"Subject '{valid_subject}' not found.", field="subject")
        raise SchemaNotFoundError(
            f"Schema not found under subject '{valid_subject}'", field="schema"
        )

    # --- subjects and versions -----------------------------------------------------------

    def list_subjects(
        self, *, include_deleted: bool = False, deleted_only: bool = False, prefix: str = ""
    ) -> list[Subject]:
        """Subject names starting with ``prefix``, sorted; ``deleted_only``: those whose
        versions are all soft-deleted."""
        if deleted_only:
            live = set(self._store.list_subjects(include_deleted=False))
            names = [s for s in self._store.list_subjects(include_deleted=True) if s not in live]
        else:
            names = self._store.list_subjects(include_deleted=include_deleted)
        return [name for name in names if name.startswith(prefix)]

    def list_schemas(
        self, *, prefix: str = "", include_deleted: bool = False, latest_only: bool = False
    ) -> list[SubjectVersion]:
        """The versions of every subject starting with ``prefix`` (only its newest one with
        ``latest_only``), by subject then version (Confluent's ``GET /schemas``)."""
        found: list[SubjectVersion] = []
        for subject in self.list_subjects(include_deleted=include_deleted, prefix=prefix):
            versions = self._store.subject_versions(
                subject=subject, include_deleted=include_deleted
            )
            found += versions[-1:] if latest_only else versions
        return found

    def list_versions(
        self, subject: str, *, include_deleted: bool = False, deleted_only: bool = False
    ) -> list[SubjectVersion]:
        """The subject's versions, oldest first (``deleted_only``: the soft-deleted ones);
        40401 when it has none to show."""
        valid_subject = parse_subject(subject)
        versions = self._store.subject_versions(
            subject=valid_subject, include_deleted=include_deleted or deleted_only
        )
        if not versions:
            raise SubjectNotFoundError(f"Subject '{valid_subject}' not found.", field="subject")
        return [v for v in versions if v.deleted] if deleted_only else versions

    def get_version(
        self, subject: str, version: str | int, *, include_deleted: bool = False
    ) -> SubjectVersion:
        """One version (``latest`` / -1 for the newest live one)."""
        valid_subject = parse_subject(subject)
        wanted = parse_version(version)
        versions = self._store.subject_versions(subject=valid_subject, include_deleted=True)
        if not versions or (wanted is None and all(v.deleted for v in versions)):
            raise SubjectNotFoundError(f"Subject '{valid_subject}' not found.", field="subject")
        if wanted is None:
            return [v for v in versions if not v.deleted][-1]
        for candidate in versions:
            if candidate.version == wanted and (include_deleted or not candidate.deleted):
                return candidate
        raise VersionNotFoundError(
            f"Version {wanted} not found in subject '{valid_subject}'.", field="version"
        )

    def referenced_by(self, subject: str, version: str | int) -> list[SchemaId]:
        """Ids of the schemas that reference this version (40401, 40402 when it is unknown)."""
        found = self.get_version(subject, version, include_deleted=True)
        return self._store.referenced_by(subject=found.subject, version=found.version)

    # --- compatibility -------------------------------------------------------------------

    def check(
        self,
        subject: str,
        schema_text: str,
        *,
        version: str | int | None = None,
        schema_type: str | None = None,
        references: Sequence[ReferenceRequest] = (),
    ) -> CompatibilityReport:
        """Would ``schema_text`` be accepted? ``version`` None: against what the level names;
        a version (or ``latest``): against that version only, in the level's direction."""
        valid_subject = parse_subject(subject)
        parsed = self.parse(schema_text, schema_type, references).parsed
        level = self.effective_level(valid_subject)
        if version is None:
            live = self._store.subject_versions(subject=valid_subject, include_deleted=False)
            targets = live
        else:
            wanted = parse_version(version)
            live = self._store.subject_versions(subject=valid_subject, include_deleted=False)
            if wanted is None and not live:
                return CompatibilityReport(compatible=True, level=level)
            targets = [self.get_version(valid_subject, version)]
            if level.transitive:
                # Against one named version, a transitive level means its plain form.
                level = CompatibilityLevel(level.value.removesuffix("_TRANSITIVE"))
        return self._report(level, parsed, targets)

    def _report(
        self, level: CompatibilityLevel, parsed: FormatSchema, live: Sequence[SubjectVersion]
    ) -> CompatibilityReport:
        """Check ``parsed`` against ``live`` (oldest first) with its format's rules.

        A version of another schema type is incompatible at every level but NONE (Confluent
        compares only schemas of one type).
        """
        targets = list(live) if level.transitive else list(live[-1:])
        if level is not CompatibilityLevel.NONE:
            other_types = [
                f"SCHEMA_TYPE_CHANGED: version {target.version} is {target.schema_type}, the new"
                f" schema is {parsed.schema_type} ({level.value})"
                for target in reversed(targets)
                if target.schema_type != parsed.schema_type
            ]
            if other_types:
                return CompatibilityReport(
                    compatible=False, reasons=tuple(other_types), level=level
                )
        existing = [(int(version.version), self._parsed(version)) for version in live]
        return check_compatibility(
            level,
            parsed.model,
            existing,
            incompatibilities=incompatibilities_of(parsed.schema_type),
        )

    # --- configuration ---------------------------------------------------------------------

    def get_config(
        self, subject: str | None, *, default_to_global: bool = False
    ) -> CompatibilityLevel | None:
        """The level set for ``subject`` (None: the global level, never None itself)."""
        if subject is None:
            return self._store.get_config(subject=None) or DEFAULT_COMPATIBILITY
        valid_subject = parse_subject(subject)
        level = self._store.get_config(subject=valid_subject)
        if level is None and default_to_global:
            return self.get_config(None)
        return level

    def set_config(self, subject: str | None, level: str) -> CompatibilityLevel:
        """Set the level for ``subject`` (None: global); 42203 for an unknown level name."""
        parsed_level = CompatibilityLevel.parse(level)
        valid_subject = None if subject is None else parse_subject(subject)
        self._store.set_config(subject=valid_subject, level=parsed_level)
        return parsed_level

    def delete_config(self, subject: str | None) -> CompatibilityLevel:
        """Remove the level of ``subject`` (None: reset global to BACKWARD); returns the old one."""
        if subject is None:
            old = self._store.delete_config(subject=None)
            return old or DEFAULT_COMPATIBILITY
        valid_subject = parse_subject(subject)
        old = self._store.delete_config(subject=valid_subject)
        if old is None:
            if not self._store.subject_versions(subject=valid_subject, include_deleted=True):
                raise SubjectNotFoundError(f"Subject '{valid_subject}' not found.", field="subject")
            return self.get_config(None) or DEFAULT_COMPATIBILITY
        return old

    # --- deletes ----------------------------------------------------------------------------

    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[Version]:
        """Soft-delete a subject, or permanently delete a soft-deleted one; the versions hit."""
        valid_subject = self._writable(subject)
        return self._store.delete_subject(subject=valid_subject, permanent=permanent)

    def delete_version(
        self, subject: str, version: str | int, *, permanent: bool = False
    ) -> Version:
        """Soft-delete one version, or permanently delete a soft-deleted one."""
        return self._store.delete_version(
            subject=self._writable(subject), version=parse_version(version), permanent=permanent
        )

    def _writable(self, subject: str) -> Subject:
        """The subject, if its mode lets versions be deleted (42205 in READONLY)."""
        valid_subject = parse_subject(subject)
        if self.effective_mode(valid_subject) is Mode.READONLY:
            raise OperationNotPermittedError(
                f"Subject '{valid_subject}' is in read-only mode: set its mode (or the global"
                " one) to READWRITE to delete",
                field="mode",
            )
        return valid_subject

    # --- modes ---------------------------------------------------------------------------------

    def effective_mode(self, subject: Subject) -> Mode:
        """The subject's mode, else the global one, else READWRITE."""
        return self._store.effective_mode(subject=subject) or DEFAULT_MODE

    def get_mode(self, subject: str | None, *, default_to_global: bool = False) -> Mode:
        """The mode of ``subject`` (None: the global one); 40409 when it has none of its own."""
        if subject is None:
            return self._store.get_mode(subject=None) or DEFAULT_MODE
        valid_subject = parse_subject(subject)
        mode = self._store.get_mode(subject=valid_subject)
        if mode is None:
            if default_to_global:
                return self.get_mode(None)
            raise SubjectModeNotFoundError(
                f"Subject '{valid_subject}' does not have subject-level mode configured",
                field="subject",
            )
        return mode

    def set_mode(self, subject: str | None, mode: object, *, force: bool = False) -> Mode:
        """Set the mode of ``subject`` (None: global); IMPORT needs no versions there, or force."""
        new_mode = Mode.parse(mode)
        valid_subject = None if subject is None else parse_subject(subject)
        only_if_empty = new_mode is Mode.IMPORT and not force
        self._store.set_mode(subject=valid_subject, mode=new_mode, only_if_empty=only_if_empty)
        return new_mode

    def delete_mode(self, subject: str | None) -> Mode:
        """Remove the mode of ``subject`` (None: reset the global one); returns the old mode."""
        valid_subject = None if subject is None else parse_subject(subject)
        old = self._store.delete_mode(subject=valid_subject)
        if old is None and valid_subject is not None:
            raise SubjectModeNotFoundError(
                f"Subject '{valid_subject}' does not have subject-level mode configured",
                field="subject",
            )
        return old or DEFAULT_MODE
