"""Avro reader/writer compatibility with a reason (path + what breaks) for every problem.

The rules are Avro's schema resolution as Java's ``SchemaCompatibility`` implements it (the
checker Confluent Schema Registry runs): same-type schemas recurse, the writer's union must
have every branch readable, the promotions int->long->float->double and string<->bytes are
allowed, a reader field missing from the writer needs a default, an enum may gain writer
symbols only when the reader has an enum default, fixed sizes must be equal, named types
match by unqualified name or by the reader's aliases.

``avro.compatibility`` (avro 1.12.2) gets the verdict right in the cases we test, but it
keeps messages and locations in two separate sets (a reason cannot be paired with its path),
loses the location inside union-to-union checks, writes paths as field *indexes*
(``/fields/2``) and compares aliases without resolving them against the namespace. This
module keeps each reason with its path, written with field names; the unit tests compare
its verdicts with ``avro.compatibility`` on the whole matrix.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import avro.schema

from lockgate.schema_registry.model import CompatibilityLevel

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
#: writer type -> reader types that can read it (Avro's promotions).
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class IncompatibilityKind(enum.Enum):
    """What kind of problem makes a reader unable to read a writer's data."""

    NAME_MISMATCH = "NAME_MISMATCH"
    FIXED_SIZE_MISMATCH = "FIXED_SIZE_MISMATCH"
    MISSING_ENUM_SYMBOLS = "MISSING_ENUM_SYMBOLS"
    READER_FIELD_MISSING_DEFAULT_VALUE = "READER_FIELD_MISSING_DEFAULT_VALUE"
    TYPE_MISMATCH = "TYPE_MISMATCH"
    MISSING_UNION_BRANCH = "MISSING_UNION_BRANCH"


@dataclass(frozen=True)
class Incompatibility:
    """One reason a reader cannot read a writer's data."""

    kind: IncompatibilityKind
    #: Where, with field names: ``/User/address/zip``, ``[]`` for array items, ``{}`` for map
    #: values, ``<long>`` for a union branch.
    path: str
    #: What breaks, in words.
    message: str

    def describe(self) -> str:
        """One line: kind, path and message."""
        return f"{self.kind.value} at {self.path}: {self.message}"


@dataclass(frozen=True)
class Difference:
    """One change found between an original JSON or Protobuf schema and its update
    (Confluent's ``Difference``): its kind in the format's ``Change`` table
    (``json_rules``, ``protobuf_rules``), where, and that table's verdict."""

    change: enum.Enum
    #: Where: ``#/properties/address/properties/zip`` (JSON), ``#/acme.Order/total=2``
    #: (Protobuf: message, then field name = number).
    path: str
    #: Whether the format's rule table keeps the change compatible.
    compatible: bool

    def describe(self) -> str:
        """One line: the change and where."""
        return f"{self.change.value} at {self.path}"


@dataclass(frozen=True)
class CompatibilityReport:
    """The answer of a compatibility check: yes/no and every reason when no."""

    compatible: bool
    reasons: tuple[str, ...] = ()
    #: The level the check applied.
    level: CompatibilityLevel = CompatibilityLevel.NONE


def reader_writer_incompatibilities(
    reader: avro.schema.Schema, writer: avro.schema.Schema
) -> list[Incompatibility]:
    """Every reason ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    return _Checker().check(reader, writer, "/" + _root_name(reader))


def check_compatibility(
    level: CompatibilityLevel,
    new_schema: Any,
    existing: Sequence[tuple[int, Any]],
    *,
    incompatibilities: Callable[[Any, Any], Sequence[Any]] | None = None,
) -> CompatibilityReport:
    """Check ``new_schema`` against the subject's live versions ``(version, schema)``, oldest first.

    Non-transitive levels look at the newest version only, as Confluent does.
    ``incompatibilities(reader, writer)`` is the format's rule set (Avro's by default); each
    reason it returns has a ``describe()``.
    """
    rules = incompatibilities or reader_writer_incompatibilities
    if level is CompatibilityLevel.NONE or not existing:
        return CompatibilityReport(compatible=True, level=level)
    targets = list(existing) if level.transitive else [existing[-1]]
    reasons: list[str] = []
    for version, old_schema in reversed(targets):
        if level.checks_backward:
            for problem in rules(new_schema, old_schema):
                reasons.append(
                    f"{problem.describe()} (the new schema cannot read data written with"
                    f" version {version}; {level.value})"
                )
        if level.checks_forward:
            for problem in rules(old_schema, new_schema):
                reasons.append(
                    f"{problem.describe()} (version {version} cannot read data written with"
                    f" the new schema; {level.value})"
                )
    return CompatibilityReport(compatible=not reasons, reasons=tuple(reasons), level=level)


def _root_name(schema: avro.schema.Schema) -> str:
    if isinstance(schema, avro.schema.NamedSchema):
        return str(schema.name)
    return str(schema.type)


def _type_label(schema: avro.schema.Schema) -> str:
    if isinstance(schema, avro.schema.NamedSchema):
        return f"{schema.type} {schema.fullname}"
    if isinstance(schema, avro.schema.UnionSchema):
        return "union [" + ", ".join(_type_label(branch) for branch in schema.schemas) + "]"
    if isinstance(schema, avro.schema.ArraySchema):
        return f"array of {_type_label(schema.items)}"
    if isinstance(schema, avro.schema.MapSchema):
        return f"map of {_type_label(schema.values)}"
    return str(schema.type)


def _qualify(alias: str, namespace: str | None) -> str:
    # Aliases are relative to the schema's namespace unless they contain a dot (Avro spec).
    if "." in alias or not namespace:
        return alias
    return f"{namespace}.{alias}"


def _names_match(reader: avro.schema.NamedSchema, writer: avro.schema.NamedSchema) -> bool:
    if reader.name == writer.name:
        return True
    raw_aliases: Any = reader.props.get("aliases") or []
    aliases = [str(alias) for alias in raw_aliases]
    namespace = reader.namespace
    return writer.fullname in {_qualify(str(alias), namespace) for alias in aliases}


class _Checker:
    """One reader/writer walk; memoises pairs so recursive types terminate."""

    def __init__(self) -> None:
        # (id(reader), id(writer)) -> result, or None while the pair is being checked:
        # a pair met again during its own check is assumed compatible (as Java does).
        self._memo: dict[tuple[int, int], list[Incompatibility] | None] = {}

    def check(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, path: str
    ) -> list[Incompatibility]:
        key = (id(reader), id(writer))
        if key in self._memo:
            cached = self._memo[key]
            # None: the pair is on the current path (a recursive type), assume compatible.
            return [] if cached is None else cached
        self._memo[key] = None
        result = self._calculate(reader, writer, path)
        self._memo[key] = result
        return result

    def _calculate(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, path: str
    ) -> list[Incompatibility]:
        reader_type, writer_type = reader.type, writer.type
        if reader_type == writer_type:
            return self._same_type(reader, writer, path)
        if isinstance(writer, avro.schema.UnionSchema):
            # Every branch the writer may have written must be readable.
            problems: list[Incompatibility] = []
            for branch in writer.schemas:
                problems += self.check(reader, branch, f"{path}<{branch.type}>")
            return problems
        if writer_type in _PROMOTIONS and reader_type in _PROMOTIONS[writer_type]:
            return []
        if isinstance(reader, avro.schema.UnionSchema):
            for branch in reader.schemas:
                if not self.check(branch, writer, path):
                    return []
            return [
                Incompatibility(
                    IncompatibilityKind.MISSING_UNION_BRANCH,
                    path,
                    f"the reader's {_type_label(reader)} has no branch that can read the"
                    f" writer's {_type_label(writer)}",
                )
            ]
        return [
            Incompatibility(
                IncompatibilityKind.TYPE_MISMATCH,
                path,
                f"reader type {_type_label(reader)} cannot read writer type {_type_label(writer)}",
            )
        ]

    def _same_type(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, path: str
    ) -> list[Incompatibility]:
        if reader.type in _PRIMITIVES:
            return []
        if isinstance(reader, avro.schema.ArraySchema):
            assert isinstance(writer, avro.schema.ArraySchema)
            return self.check(reader.items, writer.items, f"{path}[]")
        if isinstance(reader, avro.schema.MapSchema):
            assert isinstance(writer, avro.schema.MapSchema)
            return self.check(reader.values, writer.values, f"{path}{{}}")
        if isinstance(reader, avro.schema.UnionSchema):
            assert isinstance(writer, avro.schema.UnionSchema)
            problems: list[Incompatibility] = []
            for branch in writer.schemas:
                if not any(not self.check(option, branch, path) for option in reader.schemas):
                    problems.append(
                        Incompatibility(
                            IncompatibilityKind.MISSING_UNION_BRANCH,
                            f"{path}<{branch.type}>",
                            f"the writer's union branch {_type_label(branch)} has no matching"
                            f" branch in the reader's {_type_label(reader)}",
                        )
                    )
            return problems
        assert isinstance(reader, avro.schema.NamedSchema)
        assert isinstance(writer, avro.schema.NamedSchema)
        problems = []
        if not _names_match(reader, writer):
            problems.append(
                Incompatibility(
                    IncompatibilityKind.NAME_MISMATCH,
                    path,
                    f"reader {reader.type} is named {reader.fullname} but the writer's is"
                    f" {writer.fullname} (add an alias to the reader to rename)",
                )
            )
        if isinstance(reader, avro.schema.FixedSchema):
            assert isinstance(writer, avro.schema.FixedSchema)
            if reader.size != writer.size:
                problems.append(
                    Incompatibility(
                        IncompatibilityKind.FIXED_SIZE_MISMATCH,
                        path,
                        f"reader fixed size is {reader.size} bytes, writer's is {writer.size}",
                    )
                )
        elif isinstance(reader, avro.schema.EnumSchema):
            assert isinstance(writer, avro.schema.EnumSchema)
            missing = [symbol for symbol in writer.symbols if symbol not in reader.symbols]
            default = reader.props.get("default")
            if missing and not (default is not None and default in reader.symbols):
                problems.append(
                    Incompatibility(
                        IncompatibilityKind.MISSING_ENUM_SYMBOLS,
                        path,
                        f"the reader's enum lacks the writer's symbols {missing} and has no enum"
                        " default to read them as",
                    )
                )
        elif isinstance(reader, avro.schema.RecordSchema):
            assert isinstance(writer, avro.schema.RecordSchema)
            problems += self._record_fields(reader, writer, path)
        return problems

    def _record_fields(
        self,
        reader: avro.schema.RecordSchema,
        writer: avro.schema.RecordSchema,
        path: str,
    ) -> list[Incompatibility]:
        problems: list[Incompatibility] = []
        writer_fields = writer.fields_dict
        for reader_field in reader.fields:
            field_path = f"{path}/{reader_field.name}"
            writer_field = writer_fields.get(reader_field.name)
            if writer_field is None:
                field_aliases: Any = reader_field.props.get("aliases") or []
                for alias in field_aliases:
                    writer_field = writer_fields.get(alias)
                    if writer_field is not None:
                        break
            if writer_field is None:
                if not reader_field.has_default:
                    problems.append(
                        Incompatibility(
                            IncompatibilityKind.READER_FIELD_MISSING_DEFAULT_VALUE,
                            field_path,
                            f"the reader's field {reader_field.name!r} has no default and the"
                            " writer does not write it",
                        )
                    )
                continue
            problems += self.check(reader_field.type, writer_field.type, field_path)
        return problems
