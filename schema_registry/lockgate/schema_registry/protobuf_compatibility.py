"""Protobuf compatibility: which changes between two schemas break readers, with reasons.

No maintained Python library decides this, so the rules are written here, after Confluent's
(``SchemaDiff``, ``MessageSchemaDiff``, ``FieldSchemaDiff``, ``OneOfDiff`` and
``EnumSchemaDiff`` in confluentinc/schema-registry, ``protobuf-provider/src/main/java/io/
confluent/kafka/schemaregistry/protobuf/diff/``), walking compiled descriptors instead of
Square Wire's syntax tree:

- :func:`differences` compares an *original* and an *update* schema and names every change
  (:class:`Change`) with its path; fields match by number, messages and enums by name;
- ``protobuf_rules.COMPATIBLE_CHANGES`` is the rule table; any other change is a reason;
- BACKWARD compares (original = the old version, update = the new schema), FORWARD the
  reverse, FULL both, as Confluent's ``ProtobufSchema.isBackwardCompatible`` does.

Labels are read as Wire reads ``.proto`` text: a proto3 field without a label has none, so
only a change between two written labels (optional, required, repeated) counts. Map entry
messages are not types of their own: a ``map<K, V>`` field compares its key and value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Union

from google.protobuf import descriptor_pb2

from lockgate.schema_registry.compatibility import Difference
from lockgate.schema_registry.protobuf_rules import COMPATIBLE_CHANGES, Change
from lockgate.schema_registry.protobuf_schema import ProtobufModel

_Field = descriptor_pb2.FieldDescriptorProto
_Message = descriptor_pb2.DescriptorProto
_Enum = descriptor_pb2.EnumDescriptorProto
_Type = Union[_Message, _Enum]  # noqa: UP007 (a runtime alias)

#: Confluent's scalar groups (``FieldSchemaDiff.scalarKind``): a change inside a group keeps
#: the wire encoding readable (https://protobuf.dev/programming-guides/proto3/#updating).
_SCALAR_GROUPS: dict[int, str] = {
    _Field.TYPE_INT32: "GENERAL_NUMBER",
    _Field.TYPE_INT64: "GENERAL_NUMBER",
    _Field.TYPE_UINT32: "GENERAL_NUMBER",
    _Field.TYPE_UINT64: "GENERAL_NUMBER",
    _Field.TYPE_BOOL: "GENERAL_NUMBER",
    _Field.TYPE_ENUM: "GENERAL_NUMBER",
    _Field.TYPE_SINT32: "SIGNED_NUMBER",
    _Field.TYPE_SINT64: "SIGNED_NUMBER",
    _Field.TYPE_STRING: "STRING_OR_BYTES",
    _Field.TYPE_BYTES: "STRING_OR_BYTES",
    _Field.TYPE_FIXED32: "FIXED32",
    _Field.TYPE_SFIXED32: "FIXED32",
    _Field.TYPE_FIXED64: "FIXED64",
    _Field.TYPE_SFIXED64: "FIXED64",
    _Field.TYPE_FLOAT: "FLOAT",
    _Field.TYPE_DOUBLE: "DOUBLE",
}


def reader_writer_incompatibilities(
    reader: ProtobufModel, writer: ProtobufModel
) -> list[Difference]:
    """Every breaking change between the ``writer``'s schema and the ``reader``'s (empty: none)."""
    return [d for d in differences(writer, reader) if not d.compatible]


def differences(original: ProtobufModel, update: ProtobufModel) -> list[Difference]:
    """Every change from ``original`` to ``update``, compatible or not."""
    walker = _Walker(
        _Types.of(original),
        _Types.of(update),
        proto3=(original.file.syntax == "proto3", update.file.syntax == "proto3"),
    )
    if original.file.package != update.file.package:
        walker.add(Change.PACKAGE_CHANGED, "#/")
    walker.compare_types(original.file, update.file, "#", original.file.package)
    return walker.found


@dataclass(frozen=True)
class _TypeInfo:
    """A message or enum found by full name, with the package of the file defining it."""

    definition: _Type
    package: str
    #: True when the schema's own file defines it (imported types are compared where used).
    own: bool

    def local_name(self, full_name: str) -> str:
        prefix = f".{self.package}." if self.package else "."
        return full_name.removeprefix(prefix)


@dataclass(frozen=True)
class _Types:
    """Every type a schema can name, by full name (``.acme.Order``)."""

    by_name: dict[str, _TypeInfo]

    @classmethod
    def of(cls, model: ProtobufModel) -> _Types:
        found: dict[str, _TypeInfo] = {}
        for file in (*model.imports, model.file):
            scope = f".{file.package}" if file.package else ""
            own = file is model.file
            for name, definition in _definitions(scope, file.message_type, file.enum_type):
                found[name] = _TypeInfo(definition, file.package, own)
        return cls(found)

    def get(self, name: str) -> _TypeInfo | None:
        return self.by_name.get(name)


def _definitions(
    scope: str, messages: Iterable[_Message], enums: Iterable[_Enum]
) -> Iterator[tuple[str, _Type]]:
    """Every message and enum, nested ones included, with its full name."""
    for enum_type in enums:
        yield f"{scope}.{enum_type.name}", enum_type
    for message in messages:
        name = f"{scope}.{message.name}"
        yield name, message
        yield from _definitions(name, message.nested_type, message.enum_type)


@dataclass
class _Walker:
    original_types: _Types
    update_types: _Types
    #: Whether each side's file is proto3 (a field without a written label has none there).
    proto3: tuple[bool, bool]
    found: list[Difference] = field(default_factory=list)
    #: Messages already compared (a recursive type would otherwise never end).
    visited: set[str] = field(default_factory=set)

    def add(self, change: Change, path: str) -> None:
        self.found.append(Difference(change, path, compatible=change in COMPATIBLE_CHANGES))

    def compare_types(
        self,
        original: descriptor_pb2.FileDescriptorProto | _Message,
        update: descriptor_pb2.FileDescriptorProto | _Message,
        path: str,
        scope: str,
    ) -> None:
        """Messages and enums defined in ``original`` and ``update`` (a file or a message)."""
        original_messages = _messages_of(original)
        update_messages = _messages_of(update)
        original_index = {name: i for i, name in enumerate(original_messages)}
        update_index = {name: i for i, name in enumerate(update_messages)}
        for name in sorted(original_messages.keys() | update_messages.keys()):
            where = f"{path}/{name}"
            if name not in update_messages:
                self.add(Change.MESSAGE_REMOVED, where)
            elif name not in original_messages:
                self.add(Change.MESSAGE_ADDED, where)
            else:
                full_name = f"{scope}.{name}" if scope else name
                self.compare_message(
                    original_messages[name], update_messages[name], where, full_name
                )
                if original_index[name] != update_index[name]:
                    self.add(Change.MESSAGE_MOVED, where)
        original_enums = {e.name: e for e in _enums_of(original)}
        update_enums = {e.name: e for e in _enums_of(update)}
        for name in sorted(original_enums.keys() | update_enums.keys()):
            where = f"{path}/{name}"
            if name not in update_enums:
                self.add(Change.ENUM_REMOVED, where)
            elif name not in original_enums:
                self.add(Change.ENUM_ADDED, where)
            else:
                self.compare_enum(original_enums[name], update_enums[name], where)

    def compare_message(
        self, original: _Message, update: _Message, path: str, full_name: str
    ) -> None:
        """Fields, oneofs, reserved numbers and nested types (``MessageSchemaDiff``)."""
        if full_name not in self.visited:
            self.visited.add(full_name)
            self._compare_fields(original, update, path)
        self.compare_types(original, update, path, full_name)

    def _compare_fields(self, original: _Message, update: _Message, path: str) -> None:
        original_plain = {f.number: f for f in original.field if _oneof_of(original, f) is None}
        update_plain = {f.number: f for f in update.field if _oneof_of(update, f) is None}
        original_oneofs = _oneofs(original)
        update_oneofs = _oneofs(update)
        original_in_oneofs = {f.number for fields in original_oneofs.values() for f in fields}
        for name, fields in update_oneofs.items():
            moved = [f for f in fields if original_plain.pop(f.number, None) is not None]
            existing = [f for f in fields if f.number in original_in_oneofs]
            if len(moved) > 1:
                self.add(Change.MULTIPLE_FIELDS_MOVED_TO_ONEOF, f"{path}/oneof {name}")
            elif len(moved) == 1 and existing:
                self.add(Change.FIELD_MOVED_TO_EXISTING_ONEOF, f"{path}/oneof {name}")
        for name in sorted(original_oneofs.keys() | update_oneofs.keys()):
            where = f"{path}/oneof {name}"
            if name not in update_oneofs:
                self.add(Change.ONEOF_REMOVED, where)
            elif name not in original_oneofs:
                self.add(Change.ONEOF_ADDED, where)
            else:
                self._compare_oneof(original_oneofs[name], update_oneofs[name], where)
        for number in sorted(original_plain.keys() | update_plain.keys()):
            before, after = original_plain.get(number), update_plain.get(number)
            if after is None and before is not None:
                required = before.label == _Field.LABEL_REQUIRED
                self.add(
                    Change.REQUIRED_FIELD_REMOVED if required else Change.FIELD_REMOVED,
                    f"{path}/{before.name}={number}",
                )
            elif before is None and after is not None:
                required = after.label == _Field.LABEL_REQUIRED
                self.add(
                    Change.REQUIRED_FIELD_ADDED if required else Change.FIELD_ADDED,
                    f"{path}/{after.name}={number}",
                )
            elif before is not None and after is not None:
                self.compare_field(before, after, f"{path}/{after.name}={number}")
        self._check_reserved(original, update, path)

    def _compare_oneof(self, original: list[_Field], update: list[_Field], path: str) -> None:
        before = {f.number: f for f in original}
        after = {f.number: f for f in update}
        for number in sorted(before.keys() | after.keys()):
            if number not in after:
                self.add(Change.ONEOF_FIELD_REMOVED, f"{path}/{before[number].name}={number}")
            elif number not in before:
                self.add(Change.ONEOF_FIELD_ADDED, f"{path}/{after[number].name}={number}")
            else:
                self.compare_field(
                    before[number], after[number], f"{path}/{after[number].name}={number}"
                )

    def _check_reserved(self, original: _Message, update: _Message, path: str) -> None:
        """Lockgate's rule: a number the original reserved is not given to another field."""
        reserved_names = set(original.reserved_name)
        for candidate in update.field:
            if candidate.name in reserved_names:
                continue
            if any(r.start <= candidate.number < r.end for r in original.reserved_range):
                self.add(
                    Change.RESERVED_NUMBER_REUSED, f"{path}/{candidate.name}={candidate.number}"
                )

    def compare_field(self, original: _Field, update: _Field, path: str) -> None:
        """Name, kind, scalar group, label and message type (``FieldSchemaDiff``)."""
        if original.name != update.name:
            self.add(Change.FIELD_NAME_CHANGED, path)
        self._labels_and_types(
            original,
            update,
            _label(original, self.proto3[0]),
            _label(update, self.proto3[1]),
            path,
        )

    def _labels_and_types(
        self,
        original: _Field,
        update: _Field,
        original_label: int | None,
        update_label: int | None,
        path: str,
    ) -> None:
        original_map = self._map_entry(original, self.original_types)
        update_map = self._map_entry(update, self.update_types)
        original_kind = "MAP" if original_map else _kind(original)
        update_kind = "MAP" if update_map else _kind(update)
        if original_kind != update_kind:
            self.add(Change.FIELD_KIND_CHANGED, path)
        elif original_map is not None and update_map is not None:
            for before, after in zip(original_map.field, update_map.field, strict=False):
                self._labels_and_types(before, after, None, None, f"{path}/{after.name}")
        elif original_kind == "SCALAR":
            group = _SCALAR_GROUPS.get(original.type)
            if group != _SCALAR_GROUPS.get(update.type):
                self.add(Change.FIELD_SCALAR_KIND_CHANGED, path)
            elif None not in (original_label, update_label) and original_label != update_label:
                self.add(
                    Change.FIELD_STRING_OR_BYTES_LABEL_CHANGED
                    if group == "STRING_OR_BYTES"
                    else Change.FIELD_NUMERIC_LABEL_CHANGED,
                    path,
                )
        else:
            self._compare_message_types(original.type_name, update.type_name, path)

    def _compare_message_types(self, original_name: str, update_name: str, path: str) -> None:
        """Same local name, and (for imported types) a compatible definition."""
        before = self.original_types.get(original_name)
        after = self.update_types.get(update_name)
        if before is None or after is None:
            if original_name != update_name:
                self.add(Change.FIELD_NAMED_TYPE_CHANGED, path)
            return
        local = before.local_name(original_name)
        if local != after.local_name(update_name):
            self.add(Change.FIELD_NAMED_TYPE_CHANGED, path)
            return
        if (before.own and after.own) or before.definition == after.definition:
            return  # compared where it is defined, or the very same definition
        inner = _Walker(self.original_types, self.update_types, self.proto3, visited=self.visited)
        assert isinstance(before.definition, _Message) and isinstance(after.definition, _Message)
        inner.compare_message(before.definition, after.definition, f"#/{local}", original_name)
        self.found.extend(inner.found)
        if any(not d.compatible for d in inner.found):
            self.add(Change.FIELD_NAMED_TYPE_CHANGED, path)

    @staticmethod
    def _map_entry(candidate: _Field, types: _Types) -> _Message | None:
        if candidate.type != _Field.TYPE_MESSAGE:
            return None
        found = types.get(candidate.type_name)
        if found is None or not isinstance(found.definition, _Message):
            return None
        return found.definition if found.definition.options.map_entry else None

    def compare_enum(self, original: _Enum, update: _Enum, path: str) -> None:
        """Values by number (``EnumSchemaDiff``), and reserved numbers as for fields."""
        before = {value.number: value.name for value in original.value}
        after = {value.number: value.name for value in update.value}
        for number in sorted(before.keys() | after.keys()):
            if number not in after:
                self.add(Change.ENUM_CONST_REMOVED, f"{path}/{before[number]}={number}")
            elif number not in before:
                self.add(Change.ENUM_CONST_ADDED, f"{path}/{after[number]}={number}")
            elif before[number] != after[number]:
                self.add(Change.ENUM_CONST_CHANGED, f"{path}/{after[number]}={number}")
        # Lockgate's reserved rule for enum values too (their reserved ranges end inclusive).
        reserved_names = set(original.reserved_name)
        for value in update.value:
            if value.name not in reserved_names and any(
                r.start <= value.number <= r.end for r in original.reserved_range
            ):
                self.add(Change.RESERVED_NUMBER_REUSED, f"{path}/{value.name}={value.number}")


def _messages_of(
    scope: descriptor_pb2.FileDescriptorProto | _Message,
) -> dict[str, _Message]:
    """The message types defined in a file or message, map entries left out, in order."""
    if isinstance(scope, descriptor_pb2.FileDescriptorProto):
        nested = scope.message_type
    else:
        nested = scope.nested_type
    return {m.name: m for m in nested if not m.options.map_entry}


def _enums_of(scope: descriptor_pb2.FileDescriptorProto | _Message) -> list[_Enum]:
    return list(scope.enum_type)


def _oneof_of(message: _Message, candidate: _Field) -> str | None:
    """The real ``oneof`` a field is in (a proto3 ``optional`` field's synthetic one is not)."""
    if not candidate.HasField("oneof_index") or candidate.proto3_optional:
        return None
    return message.oneof_decl[candidate.oneof_index].name


def _oneofs(message: _Message) -> dict[str, list[_Field]]:
    found: dict[str, list[_Field]] = {}
    for candidate in message.field:
        name = _oneof_of(message, candidate)
        if name is not None:
            found.setdefault(name, []).append(candidate)
    return found


def _label(candidate: _Field, proto3: bool) -> int | None:
    """The label as written: None for a proto3 field written without one."""
    implicit = proto3 and candidate.label == _Field.LABEL_OPTIONAL and not candidate.proto3_optional
    return None if implicit else candidate.label


def _kind(candidate: _Field) -> str:
    if candidate.type in _SCALAR_GROUPS:
        return "SCALAR"
    return "MESSAGE"
