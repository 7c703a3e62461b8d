"""The registry's tables (SQLAlchemy Core); only the store (`store.py` on `sql.py`) queries them.

Names carry an ``sr_`` prefix so the registry can share a PostgreSQL database with the
coordinator; the Alembic migrations in ``migrations/`` create exactly these.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

#: One row per distinct normalised schema; ``id`` is the global schema id.
schemas = sa.Table(
    "sr_schemas",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # SHA-256 of the key-sorted normalised JSON; the unique constraint is what keeps two
    # processes from giving one schema two ids.
    sa.Column("fingerprint", sa.String(64), nullable=False, unique=True),
    sa.Column("schema_type", sa.String(16), nullable=False),
    sa.Column("schema_text", sa.Text, nullable=False),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
)

#: One row per (subject, version); soft-deleted rows stay with ``deleted`` set.
subject_versions = sa.Table(
    "sr_subject_versions",
    metadata,
    sa.Column("subject", sa.String(255), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("schema_id", sa.Integer, sa.ForeignKey("sr_schemas.id"), nullable=False),
    sa.Column("deleted", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    # A schema is live at most once per subject (two racing registrations of one schema in one
    # subject end with one version, not two).
    sa.Index(
        "sr_subject_versions_live_schema",
        "subject",
        "schema_id",
        unique=True,
        postgresql_where=sa.text("NOT deleted"),
        sqlite_where=sa.text("NOT deleted"),
    ),
    sa.Index("sr_subject_versions_schema_id", "schema_id"),
)

#: Compatibility levels: ``subject`` = "" is the global level.
configs = sa.Table(
    "sr_configs",
    metadata,
    sa.Column("subject", sa.String(255), primary_key=True),
    sa.Column("compatibility", sa.String(32), nullable=False),
)

#: Registry modes (READWRITE, READONLY, IMPORT): ``subject`` = "" is the global mode.
modes = sa.Table(
    "sr_modes",
    metadata,
    sa.Column("subject", sa.String(255), primary_key=True),
    sa.Column("mode", sa.String(16), nullable=False),
)

#: The config (and mode) row key of the global setting (subject names cannot be empty).
GLOBAL_CONFIG_KEY = ""

#: The references of a schema (Confluent's ``references``): part of the schema's identity, so
#: they hang off the schema row; ``position`` keeps the caller's order.
schema_references = sa.Table(
    "sr_schema_references",
    metadata,
    sa.Column("schema_id", sa.Integer, sa.ForeignKey("sr_schemas.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("subject", sa.String(255), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    # Who references (subject, version): the referencedby lookup and the delete refusal.
    sa.Index("sr_schema_references_target", "subject", "version"),
)
