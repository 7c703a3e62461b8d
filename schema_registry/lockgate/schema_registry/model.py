"""Domain values of the schema registry: ids, subjects, versions, compatibility levels."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NewType

from lockgate.schema_registry.errors import (
    InvalidCompatibilityLevelError,
    InvalidModeError,
    InvalidSubjectError,
    InvalidVersionError,
    SchemaNotFoundError,
)

#: Global schema id: one per distinct normalised schema, shared by every subject, never reused.
SchemaId = NewType("SchemaId", int)
#: A subject name (usually ``<topic>-key`` / ``<topic>-value``).
Subject = NewType("Subject", str)
#: A version number inside one subject, 1-based, never reused while the row exists.
Version = NewType("Version", int)

#: Longest subject name accepted, in characters (Confluent has no limit; a database index does).
MAX_SUBJECT_CHARS = 255
#: Apache Avro (the default ``schemaType``).
SCHEMA_TYPE_AVRO = "AVRO"
#: JSON Schema.
SCHEMA_TYPE_JSON = "JSON"
#: Protocol Buffers (``.proto`` text, or a base64 ``FileDescriptorProto``).
SCHEMA_TYPE_PROTOBUF = "PROTOBUF"


class CompatibilityLevel(enum.Enum):
    """Confluent's compatibility levels; non-transitive ones check the latest version only."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """True when every live version is checked, not only the latest."""
        return self.value.endswith("_TRANSITIVE")

    @property
    def checks_backward(self) -> bool:
        """True when the new schema must read data written with the old ones."""
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def checks_forward(self) -> bool:
        """True when the old schemas must read data written with the new one."""
        return self.value.startswith(("FORWARD", "FULL"))

    @classmethod
    def parse(cls, text: str) -> CompatibilityLevel:
        """Parse a level name case-insensitively, or raise 42203 listing the valid names."""
        try:
            return cls(text.strip().upper())
        except ValueError:
            names = ", ".join(level.value for level in cls)
            raise InvalidCompatibilityLevelError(
                f"Invalid compatibility level {text!r}: use one of {names}",
                field="compatibility",
            ) from None


class Mode(enum.Enum):
    """Confluent's registry modes: what writes a subject (or the whole registry) accepts."""

    #: Registrations, deletes and config changes as usual.
    READWRITE = "READWRITE"
    #: Registrations and deletes refused (42205); lookups and config changes still work.
    READONLY = "READONLY"
    #: Registrations may carry their own id and version (a migration from another registry);
    #: compatibility is not checked.
    IMPORT = "IMPORT"

    @classmethod
    def parse(cls, text: object) -> Mode:
        """Parse a mode name case-insensitively, or raise 42204 listing the valid names."""
        if isinstance(text, str) and text.strip().upper() in cls.__members__:
            return cls[text.strip().upper()]
        names = ", ".join(mode.value for mode in cls)
        raise InvalidModeError(f"Invalid mode {text!r}: use one of {names}", field="mode")


#: The mode when neither the subject nor the global setting names one.
DEFAULT_MODE = Mode.READWRITE


#: The level used when neither the subject nor the global config sets one (Confluent's default).
DEFAULT_COMPATIBILITY = CompatibilityLevel.BACKWARD


@dataclass(frozen=True)
class SchemaReference:
    """A named type a schema takes from another subject's version (Confluent's reference).

    For Avro, ``name`` is the full name of the type the referenced version defines.
    """

    name: str
    subject: Subject
    #: The referenced version; a caller may send -1 (latest), stored as the number it meant.
    version: Version


@dataclass(frozen=True)
class RegisteredSchema:
    """A distinct schema: its global id, normalised text and the references it resolves."""

    schema_id: SchemaId
    schema_text: str
    schema_type: str = SCHEMA_TYPE_AVRO
    references: tuple[SchemaReference, ...] = ()


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject and the schema it points to."""

    subject: Subject
    version: Version
    schema_id: SchemaId
    schema_text: str
    deleted: bool = False
    schema_type: str = SCHEMA_TYPE_AVRO
    references: tuple[SchemaReference, ...] = ()


@dataclass(frozen=True)
class RegistrationResult:
    """What a registration answers: the id, the version, and whether it was new."""

    schema_id: SchemaId
    subject: Subject
    version: Version
    created: bool


def parse_subject(text: str) -> Subject:
    """Validate a subject name; raise 42208 saying what is wrong with it."""
    if not text or not text.strip():
        raise InvalidSubjectError("Subject name is empty: pass a non-empty name", field="subject")
    if len(text) > MAX_SUBJECT_CHARS:
        raise InvalidSubjectError(
            f"Subject name is {len(text)} characters; the limit is {MAX_SUBJECT_CHARS}",
            field="subject",
        )
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise InvalidSubjectError(
            "Subject name contains a control character: use printable characters only",
            field="subject",
        )
    return Subject(text)


#: What a caller passes to mean "the newest live version".
LATEST = "latest"


def parse_version(text: str | int) -> Version | None:
    """Parse a version: a positive integer, or ``latest`` / ``-1`` (returned as None)."""
    raw = str(text).strip()
    if raw.lower() == LATEST or raw == "-1":
        return None
    try:
        number = int(raw)
    except ValueError:
        number = 0
    if number < 1 or number > 2**31 - 1:
        raise InvalidVersionError(
            f"The specified version {str(text)!r} is not a valid version id. Allowed values are"
            ' between [1, 2^31-1] and the string "latest"',
            field="version",
        )
    return Version(number)


#: Largest schema id: Confluent's ids are 32-bit signed integers.
MAX_SCHEMA_ID = 2**31 - 1


def parse_schema_id(text: str) -> SchemaId:
    """A schema id from a URL path: 1 to 2^31-1 in ASCII digits. Anything else names no
    schema, so it is 40403 (HTTP 404), as Confluent answers, rather than a bad request."""
    if text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) <= MAX_SCHEMA_ID:
        return SchemaId(int(text))
    raise SchemaNotFoundError(
        f"Schema {text[:64]!r} not found: a schema id is an integer from 1 to {MAX_SCHEMA_ID}",
        field="id",
    )
