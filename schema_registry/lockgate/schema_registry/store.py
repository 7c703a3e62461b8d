"""SQL storage of schemas, subject versions and compatibility configs (SQLite or PostgreSQL).

The only module that speaks SQL. Ids come from the database, never from process memory, so
any number of registry processes can share one database:

- a schema's global id is the ``sr_schemas`` row id; the unique constraint on its
  fingerprint makes a second registration of the same schema (from any process) select the
  existing row instead of creating one (``INSERT .. ON CONFLICT DO NOTHING`` then ``SELECT``);
- a version is ``max(version) + 1`` inside the registering transaction; two processes racing
  for the same number collide on the primary key and the loser retries the whole transaction,
  re-running the compatibility check against the version that won.

The engine, migrations and the retried write transaction are :mod:`lockgate.schema_registry.sql`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from lockgate.schema_registry import tables
from lockgate.schema_registry.errors import (
    IdDoesNotMatchError,
    InvalidSchemaError,
    OperationNotPermittedError,
    ReferenceExistsError,
    StoreUnavailableError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
    VersionSoftDeletedError,
)
from lockgate.schema_registry.model import (
    CompatibilityLevel,
    Mode,
    RegisteredSchema,
    RegistrationResult,
    SchemaId,
    SchemaReference,
    Subject,
    SubjectVersion,
    Version,
)
from lockgate.schema_registry.sql import SqlStore


@dataclass(frozen=True)
class ImportedIds:
    """The id (and maybe version) an IMPORT-mode registration brings from another registry."""

    schema_id: SchemaId
    #: None: the next version of the subject.
    version: Version | None = None


#: Validates a registration against the subject's live versions; raises to refuse it.
RegistrationCheck = Callable[[Sequence[SubjectVersion]], None]


class SchemaStore(SqlStore):
    """The registry's SQL store; methods take keyword-only arguments and return domain values."""

    # --- schemas ------------------------------------------------------------------------

    def get_schema(self, *, schema_id: SchemaId) -> RegisteredSchema | None:
        """The schema with this global id, or None."""
        with self._read() as connection:
            row = connection.execute(
                sa.select(tables.schemas.c.schema_text, tables.schemas.c.schema_type).where(
                    tables.schemas.c.id == schema_id
                )
            ).first()
            if row is None:
                return None
            references = self._references_of(connection, [schema_id]).get(schema_id, ())
        return RegisteredSchema(
            schema_id=schema_id, schema_text=row[0], schema_type=row[1], references=references
        )

    @staticmethod
    def _references_of(
        connection: Connection, schema_ids: Sequence[SchemaId]
    ) -> dict[SchemaId, tuple[SchemaReference, ...]]:
        """The references of each schema id that has any, in their stored order."""
        if not schema_ids:
            return {}
        refs = tables.schema_references
        rows = connection.execute(
            sa.select(refs.c.schema_id, refs.c.name, refs.c.subject, refs.c.version)
            .where(refs.c.schema_id.in_(sorted(set(schema_ids))))
            .order_by(refs.c.schema_id, refs.c.position)
        ).all()
        found: dict[SchemaId, list[SchemaReference]] = {}
        for row in rows:
            found.setdefault(SchemaId(row[0]), []).append(
                SchemaReference(name=row[1], subject=Subject(row[2]), version=Version(row[3]))
            )
        return {schema_id: tuple(items) for schema_id, items in found.items()}

    def _with_references(
        self, connection: Connection, rows: Sequence[Sequence[Any]]
    ) -> list[SubjectVersion]:
        versions = [self._to_version(row) for row in rows]
        references = self._references_of(connection, [v.schema_id for v in versions])
        return [
            dataclasses.replace(v, references=references[v.schema_id])
            if v.schema_id in references
            else v
            for v in versions
        ]

    def schema_usages(
        self, *, schema_id: SchemaId, include_deleted: bool
    ) -> list[tuple[Subject, Version]]:
        """Every (subject, version) pointing at this schema, sorted."""
        query = sa.select(
            tables.subject_versions.c.subject, tables.subject_versions.c.version
        ).where(tables.subject_versions.c.schema_id == schema_id)
        if not include_deleted:
            query = query.where(tables.subject_versions.c.deleted.is_(False))
        with self._read() as connection:
            rows = connection.execute(query.order_by("subject", "version")).all()
        return [(Subject(row[0]), Version(row[1])) for row in rows]

    def max_schema_id(self) -> int:
        """The highest schema id handed out so far (0 when none)."""
        with self._read() as connection:
            value = connection.execute(sa.select(sa.func.max(tables.schemas.c.id))).scalar()
        return int(value or 0)

    # --- subjects and versions ----------------------------------------------------------

    def _versions_query(self, subject: Subject) -> sa.Select[Any]:
        sv = tables.subject_versions
        return (
            sa.select(
                sv.c.subject,
                sv.c.version,
                sv.c.schema_id,
                tables.schemas.c.schema_text,
                sv.c.deleted,
                tables.schemas.c.schema_type,
            )
            .join(tables.schemas, tables.schemas.c.id == sv.c.schema_id)
            .where(sv.c.subject == subject)
            .order_by(sv.c.version)
        )

    @staticmethod
    def _to_version(row: Sequence[Any]) -> SubjectVersion:
        return SubjectVersion(
            subject=Subject(row[0]),
            version=Version(row[1]),
            schema_id=SchemaId(row[2]),
            schema_text=row[3],
            deleted=bool(row[4]),
            schema_type=row[5],
        )

    def subject_versions(self, *, subject: Subject, include_deleted: bool) -> list[SubjectVersion]:
        """The subject's versions, oldest first (soft-deleted ones only when asked)."""
        with self._read() as connection:
            return self._subject_versions(connection, subject, include_deleted)

    def _subject_versions(
        self, connection: Connection, subject: Subject, include_deleted: bool
    ) -> list[SubjectVersion]:
        query = self._versions_query(subject)
        if not include_deleted:
            query = query.where(tables.subject_versions.c.deleted.is_(False))
        return self._with_references(connection, connection.execute(query).all())

    def list_subjects(self, *, include_deleted: bool) -> list[Subject]:
        """Subjects with at least one version (live ones only unless ``include_deleted``)."""
        sv = tables.subject_versions
        query = sa.select(sv.c.subject).distinct().order_by(sv.c.subject)
        if not include_deleted:
            query = query.where(sv.c.deleted.is_(False))
        with self._read() as connection:
            return [Subject(row[0]) for row in connection.execute(query).all()]

    def find_in_subject(
        self, *, subject: Subject, fingerprint: str, include_deleted: bool
    ) -> SubjectVersion | None:
        """The newest version of ``subject`` whose schema has this fingerprint, or None."""
        query = self._versions_query(subject).where(tables.schemas.c.fingerprint == fingerprint)
        if not include_deleted:
            query = query.where(tables.subject_versions.c.deleted.is_(False))
        with self._read() as connection:
            rows = connection.execute(query).all()
            return self._with_references(connection, rows[-1:])[0] if rows else None

    def register(
        self,
        *,
        subject: Subject,
        fingerprint: str,
        schema_text: str,
        schema_type: str,
        check: RegistrationCheck,
        references: Sequence[SchemaReference] = (),
        imported: ImportedIds | None = None,
    ) -> RegistrationResult:
        """Register a schema under ``subject``, idempotently, in one transaction.

        If the schema is already a live version of the subject, that version is returned.
        Otherwise ``check`` sees the live versions (and raises to refuse), the schema gets its
        global id (existing or new) and the next version number. Each of ``references`` must
        still be a live version when the transaction writes (42201 otherwise): a delete racing
        the registration either sees the new reference (and is refused) or wins (and this
        registration is refused). ``imported`` (IMPORT mode) gives the id, and maybe the
        version, the schema must get (42207 when the id is another schema's, 42205 when the
        version is taken).
        """

        def work(connection: Connection) -> RegistrationResult:
            sv = tables.subject_versions
            existing = connection.execute(
                self._versions_query(subject).where(
                    tables.schemas.c.fingerprint == fingerprint, sv.c.deleted.is_(False)
                )
            ).first()
            if existing is not None:
                return RegistrationResult(
                    schema_id=SchemaId(existing[2]),
                    subject=subject,
                    version=Version(existing[1]),
                    created=False,
                )
            check(self._subject_versions(connection, subject, include_deleted=False))
            self._lock_referenced(connection, references)
            if imported is None:
                schema_id, inserted = self._insert_or_select_schema(
                    connection, fingerprint, schema_text, schema_type
                )
            else:
                schema_id, inserted = self._insert_imported_schema(
                    connection, imported.schema_id, fingerprint, schema_text, schema_type
                )
            if inserted and references:
                self._insert_references(connection, schema_id, references)
            version = self._next_version(connection, subject, imported)
            connection.execute(
                sa.insert(sv).values(
                    subject=subject, version=version, schema_id=schema_id, deleted=False
                )
            )
            return RegistrationResult(
                schema_id=schema_id, subject=subject, version=version, created=True
            )

        return self._write(work)

    @staticmethod
    def _insert_references(
        connection: Connection, schema_id: SchemaId, references: Sequence[SchemaReference]
    ) -> None:
        connection.execute(
            sa.insert(tables.schema_references),
            [
                {
                    "schema_id": schema_id,
                    "position": position,
                    "name": ref.name,
                    "subject": ref.subject,
                    "version": ref.version,
                }
                for position, ref in enumerate(references)
            ],
        )

    @staticmethod
    def _next_version(
        connection: Connection, subject: Subject, imported: ImportedIds | None
    ) -> Version:
        """The version a registration gets: the imported one if free, else highest + 1."""
        sv = tables.subject_versions
        if imported is not None and imported.version is not None:
            taken = connection.execute(
                sa.select(sv.c.version).where(
                    sv.c.subject == subject, sv.c.version == imported.version
                )
            ).first()
            if taken is not None:
                raise OperationNotPermittedError(
                    f"Version {imported.version} of subject '{subject}' already exists; an"
                    " import cannot overwrite it",
                    field="version",
                )
            return imported.version
        highest = connection.execute(
            sa.select(sa.func.max(sv.c.version)).where(sv.c.subject == subject)
        ).scalar()
        return Version(int(highest or 0) + 1)

    def _insert_imported_schema(
        self,
        connection: Connection,
        schema_id: SchemaId,
        fingerprint: str,
        schema_text: str,
        schema_type: str,
    ) -> tuple[SchemaId, bool]:
        """Store the schema under the id an import names (Confluent's IMPORT mode)."""
        schemas = tables.schemas
        by_id = connection.execute(
            sa.select(schemas.c.fingerprint).where(schemas.c.id == schema_id)
        ).scalar()
        if by_id is not None:
            if by_id != fingerprint:
                raise IdDoesNotMatchError(
                    f"Schema id {schema_id} is already another schema; an import cannot"
                    " overwrite it",
                    field="id",
                )
            return schema_id, False
        by_fingerprint = connection.execute(
            sa.select(schemas.c.id).where(schemas.c.fingerprint == fingerprint)
        ).scalar()
        if by_fingerprint is not None:
            raise IdDoesNotMatchError(
                f"This schema already has id {by_fingerprint}; it cannot also have id {schema_id}",
                field="id",
            )
        connection.execute(
            sa.insert(schemas).values(
                id=schema_id,
                fingerprint=fingerprint,
                schema_text=schema_text,
                schema_type=schema_type,
            )
        )
        if self._dialect == "postgresql":
            # Ids handed out later must start above the imported ones.
            connection.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('sr_schemas', 'id'),"
                " (SELECT MAX(id) FROM sr_schemas))"
            )
        return schema_id, True

    @staticmethod
    def _lock_referenced(connection: Connection, references: Sequence[SchemaReference]) -> None:
        """Check each referenced version is live, locking its row (PostgreSQL) against deletes."""
        sv = tables.subject_versions
        for ref in references:
            found = connection.execute(
                sa.select(sv.c.version)
                .where(
                    sv.c.subject == ref.subject,
                    sv.c.version == ref.version,
                    sv.c.deleted.is_(False),
                )
                .with_for_update()
            ).first()
            if found is None:
                raise InvalidSchemaError(
                    f"Invalid schema: no schema reference found for subject {ref.subject!r} and"
                    f" version {ref.version} (reference {ref.name}); it was deleted meanwhile",
                    field="references",
                )

    def _insert_or_select_schema(
        self, connection: Connection, fingerprint: str, schema_text: str, schema_type: str
    ) -> tuple[SchemaId, bool]:
        values = {
            "fingerprint": fingerprint,
            "schema_text": schema_text,
            "schema_type": schema_type,
        }
        insert: Any
        if self._dialect == "postgresql":
            insert = postgresql.insert(tables.schemas)
        elif self._dialect == "sqlite":
            insert = sqlite.insert(tables.schemas)
        else:  # pragma: no cover - only the two supported databases are configured
            raise StoreUnavailableError(f"unsupported database dialect {self._dialect}")
        inserted = connection.execute(
            insert.values(**values)
            .on_conflict_do_nothing(index_elements=["fingerprint"])
            .returning(tables.schemas.c.id)
        ).scalar()
        if inserted is not None:
            return SchemaId(int(inserted)), True
        # Another transaction (maybe another process) registered it first: use its id.
        existing = connection.execute(
            sa.select(tables.schemas.c.id).where(tables.schemas.c.fingerprint == fingerprint)
        ).scalar_one()
        return SchemaId(int(existing)), False

    # --- deletes ------------------------------------------------------------------------

    def delete_subject(self, *, subject: Subject, permanent: bool) -> list[Version]:
        """Soft-delete the subject's live versions, or permanently remove a soft-deleted subject.

        Returns the versions affected. Confluent's rules: a permanent delete needs a soft
        delete first (40405); soft-deleting twice is 40404.
        """

        def work(connection: Connection) -> list[Version]:
            sv = tables.subject_versions
            rows = self._subject_versions(connection, subject, include_deleted=True)
            if not rows:
                raise SubjectNotFoundError(f"Subject '{subject}' not found.", field="subject")
            live = [row for row in rows if not row.deleted]
            self._refuse_if_referenced(connection, subject, [row.version for row in rows])
            if permanent:
                if live:
                    raise SubjectNotSoftDeletedError(
                        f"Subject '{subject}' was not deleted first before being permanently"
                        " deleted: delete it without permanent=true first",
                        field="subject",
                    )
                connection.execute(sa.delete(sv).where(sv.c.subject == subject))
                connection.execute(
                    sa.delete(tables.configs).where(tables.configs.c.subject == subject)
                )
                return [row.version for row in rows]
            if not live:
                raise SubjectSoftDeletedError(
                    f"Subject '{subject}' was soft deleted. Set permanent=true to delete"
                    " permanently",
                    field="subject",
                )
            connection.execute(
                sa.update(sv)
                .where(sv.c.subject == subject, sv.c.deleted.is_(False))
                .values(deleted=True)
            )
            return [row.version for row in live]

        return self._write(work)

    def delete_version(
        self, *, subject: Subject, version: Version | None, permanent: bool
    ) -> Version:
        """Soft-delete one version (None: the latest live one), or permanently remove it."""

        def work(connection: Connection) -> Version:
            sv = tables.subject_versions
            rows = self._subject_versions(connection, subject, include_deleted=True)
            if not rows:
                raise SubjectNotFoundError(f"Subject '{subject}' not found.", field="subject")
            if version is None:
                # "latest" means the newest live version, or for a permanent delete the newest.
                candidates = rows if permanent else [row for row in rows if not row.deleted]
                if not candidates:
                    raise SubjectNotFoundError(f"Subject '{subject}' not found.", field="subject")
                target = candidates[-1]
            else:
                matches = [row for row in rows if row.version == version]
                if not matches:
                    raise VersionNotFoundError(
                        f"Version {version} not found in subject '{subject}'.", field="version"
                    )
                target = matches[0]
            self._refuse_if_referenced(connection, subject, [target.version])
            where = (sv.c.subject == subject, sv.c.version == target.version)
            if permanent:
                if not target.deleted:
                    raise VersionNotSoftDeletedError(
                        f"Subject '{subject}' Version {target.version} was not deleted first"
                        " before being permanently deleted: delete it without permanent=true"
                        " first",
                        field="version",
                    )
                connection.execute(sa.delete(sv).where(*where))
            else:
                if target.deleted:
                    raise VersionSoftDeletedError(
                        f"Subject '{subject}' Version {target.version} was soft deleted. Set"
                        " permanent=true to delete permanently",
                        field="version",
                    )
                connection.execute(sa.update(sv).where(*where).values(deleted=True))
            return target.version

        return self._write(work)

    def referenced_by(self, *, subject: Subject, version: Version) -> list[SchemaId]:
        """Ids of the schemas referencing ``subject``/``version`` that a version still uses."""
        with self._read() as connection:
            return self._referencing_ids(connection, subject, [version])

    @staticmethod
    def _referencing_ids(
        connection: Connection, subject: Subject, versions: Sequence[Version]
    ) -> list[SchemaId]:
        # A schema whose every version was permanently deleted no longer holds a reference
        # (Confluent drops it on the tombstone); a soft-deleted version still does, because
        # its id stays readable and readers resolve the reference.
        refs, sv = tables.schema_references, tables.subject_versions
        query = (
            sa.select(refs.c.schema_id)
            .distinct()
            .join(sv, sv.c.schema_id == refs.c.schema_id)
            .where(refs.c.subject == subject, refs.c.version.in_(list(versions)))
            .order_by(refs.c.schema_id)
        )
        return [SchemaId(row[0]) for row in connection.execute(query).all()]

    def _refuse_if_referenced(
        self, connection: Connection, subject: Subject, versions: Sequence[Version]
    ) -> None:
        """42206 when another schema references one of ``versions`` (Confluent's rule)."""
        referencing = self._referencing_ids(connection, subject, versions)
        if referencing:
            raise ReferenceExistsError(
                f"One or more references exist to the schema {{subject={subject},"
                f" versions={sorted(versions)}}}: schema ids {referencing} reference it; delete"
                " the referencing versions (permanently) first",
                field="version",
            )

    # --- compatibility configs and modes ------------------------------------------------

    def get_config(self, *, subject: Subject | None) -> CompatibilityLevel | None:
        """The level set for ``subject`` (None: the global one), or None when not set."""
        value = self._get_setting(tables.configs.c.compatibility, subject)
        return None if value is None else CompatibilityLevel(value)

    def set_config(self, *, subject: Subject | None, level: CompatibilityLevel) -> None:
        """Set the level for ``subject`` (None: the global one)."""
        self._set_setting(tables.configs.c.compatibility, subject, level.value)

    def delete_config(self, *, subject: Subject | None) -> CompatibilityLevel | None:
        """Remove the level set for ``subject``; returns what it was (None: was not set)."""
        value = self._delete_setting(tables.configs.c.compatibility, subject)
        return None if value is None else CompatibilityLevel(value)

    def effective_config(self, *, subject: Subject) -> CompatibilityLevel | None:
        """The subject's level, else the global one, else None (one read)."""
        value = self._effective_setting(tables.configs.c.compatibility, subject)
        return None if value is None else CompatibilityLevel(value)

    def effective_mode(self, *, subject: Subject) -> Mode | None:
        """The subject's mode, else the global one, else None (one read)."""
        value = self._effective_setting(tables.modes.c.mode, subject)
        return None if value is None else Mode(value)

    def get_mode(self, *, subject: Subject | None) -> Mode | None:
        """The mode set for ``subject`` (None: the global one), or None when not set."""
        value = self._get_setting(tables.modes.c.mode, subject)
        return None if value is None else Mode(value)

    def set_mode(self, *, subject: Subject | None, mode: Mode, only_if_empty: bool) -> None:
        """Set the mode for ``subject`` (None: the global one).

        ``only_if_empty``: refuse (42205) when the subject (or, globally, the registry) has
        versions, checked in the same transaction as the write.
        """

        def guard(connection: Connection) -> None:
            sv = tables.subject_versions
            query = sa.select(sv.c.subject).limit(1)
            if subject is not None:
                query = query.where(sv.c.subject == subject)
            if only_if_empty and connection.execute(query).first() is not None:
                where = (
                    "the registry has subjects" if subject is None else f"'{subject}' has versions"
                )
                raise OperationNotPermittedError(
                    f"Cannot set mode {mode.value}: {where}; pass force=true to set it anyway",
                    field="mode",
                )

        self._set_setting(tables.modes.c.mode, subject, mode.value, guard=guard)

    def delete_mode(self, *, subject: Subject | None) -> Mode | None:
        """Remove the mode set for ``subject``; returns what it was (None: was not set)."""
        value = self._delete_setting(tables.modes.c.mode, subject)
        return None if value is None else Mode(value)
