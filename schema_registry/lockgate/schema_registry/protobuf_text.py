"""A compiled Protobuf file written back as ``.proto`` text: the registry's canonical form.

Confluent stores and returns a Protobuf schema as canonical ``.proto`` text even when a
serializer sent it as a base64 ``FileDescriptorProto``; this module writes that text from the
descriptor: syntax, package, imports, file options, messages (fields, ``map<K, V>``,
``oneof``, proto3 ``optional``, reserved numbers and names, extension ranges), enums,
extensions and services, one declaration per line, types by their full name (``.acme.Money``).

What it cannot write (proto2 groups, editions) raises :class:`Unprintable`; the caller checks
every text it writes by compiling it again and keeps the schema as sent when the two differ
(custom options, say), so a schema is never stored as a text that means something else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

_Field = descriptor_pb2.FieldDescriptorProto
_Message = descriptor_pb2.DescriptorProto
_Enum = descriptor_pb2.EnumDescriptorProto

#: Highest field number, written ``max`` in ranges.
_MAX_FIELD_NUMBER = 536_870_911
_SCALARS = {
    _Field.TYPE_DOUBLE: "double",
    _Field.TYPE_FLOAT: "float",
    _Field.TYPE_INT64: "int64",
    _Field.TYPE_UINT64: "uint64",
    _Field.TYPE_INT32: "int32",
    _Field.TYPE_FIXED64: "fixed64",
    _Field.TYPE_FIXED32: "fixed32",
    _Field.TYPE_BOOL: "bool",
    _Field.TYPE_STRING: "string",
    _Field.TYPE_BYTES: "bytes",
    _Field.TYPE_UINT32: "uint32",
    _Field.TYPE_SFIXED32: "sfixed32",
    _Field.TYPE_SFIXED64: "sfixed64",
    _Field.TYPE_SINT32: "sint32",
    _Field.TYPE_SINT64: "sint64",
}
_LABELS = {
    _Field.LABEL_OPTIONAL: "optional",
    _Field.LABEL_REQUIRED: "required",
    _Field.LABEL_REPEATED: "repeated",
}


class Unprintable(ValueError):
    """The descriptor uses something this writer does not write (the reason says what)."""


def proto_text(file: descriptor_pb2.FileDescriptorProto) -> str:
    """The file as ``.proto`` text (see the module's docstring for what it covers)."""
    syntax = file.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise Unprintable(f"syntax {syntax!r}")
    lines = [f'syntax = "{syntax}";']
    if file.package:
        lines.append(f"package {file.package};")
    public, weak = set(file.public_dependency), set(file.weak_dependency)
    for index, dependency in enumerate(file.dependency):
        modifier = "public " if index in public else "weak " if index in weak else ""
        lines.append(f'import {modifier}"{dependency}";')
    lines += [f"option {option};" for option in _options(file.options)]
    writer = _Writer(proto3=syntax == "proto3", lines=lines)
    for message in file.message_type:
        writer.message(message, 0)
    for enum_type in file.enum_type:
        writer.enum(enum_type, 0)
    writer.extensions(file.extension, 0)
    for service in file.service:
        writer.service(service)
    return "\n".join(lines) + "\n"


class _Writer:
    def __init__(self, *, proto3: bool, lines: list[str]) -> None:
        self.proto3 = proto3
        self.lines = lines

    def add(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def message(self, message: _Message, depth: int) -> None:
        self.add(depth, f"message {message.name} {{")
        inner = depth + 1
        for option in _options(message.options):
            self.add(inner, f"option {option};")
        entries = {m.name: m for m in message.nested_type if m.options.map_entry}
        fields = list(message.field)
        written = 0
        # protoc adds a map's entry type to nested_type where the map field stands: writing
        # nested messages and fields interleaved keeps both lists in their order.
        for nested in message.nested_type:
            if nested.options.map_entry:
                owner = next(
                    (i for i, f in enumerate(fields) if f.type_name.endswith(f".{nested.name}")),
                    len(fields) - 1,
                )
                written = self._fields(message, fields, written, owner + 1, entries, inner)
            else:
                self.message(nested, inner)
        self._fields(message, fields, written, len(fields), entries, inner)
        for start, end in ((r.start, r.end - 1) for r in message.extension_range):
            self.add(inner, f"extensions {_range(start, end)};")
        self._reserved(
            ((r.start, r.end - 1) for r in message.reserved_range), message.reserved_name, inner
        )
        for enum_type in message.enum_type:
            self.enum(enum_type, inner)
        self.extensions(message.extension, inner)
        self.add(depth, "}")

    def _fields(
        self,
        message: _Message,
        fields: list[_Field],
        start: int,
        stop: int,
        entries: dict[str, _Message],
        depth: int,
    ) -> int:
        """Write ``fields[start:stop]`` (a oneof whole, at its first member); the next index."""
        index = start
        while index < stop:
            field = fields[index]
            if field.HasField("oneof_index") and not field.proto3_optional:
                members = [
                    f
                    for f in fields
                    if f.HasField("oneof_index")
                    and f.oneof_index == field.oneof_index
                    and not f.proto3_optional
                ]
                self._oneof(message, field.oneof_index, members, depth)
                index += len(members)
                continue
            self.add(depth, self._field(field, entries, in_oneof=False) + ";")
            index += 1
        return max(index, start)

    def _oneof(self, message: _Message, index: int, fields: list[_Field], depth: int) -> None:
        declaration = message.oneof_decl[index]
        self.add(depth, f"oneof {declaration.name} {{")
        for option in _options(declaration.options):
            self.add(depth + 1, f"option {option};")
        for field in fields:
            self.add(depth + 1, self._field(field, {}, in_oneof=True) + ";")
        self.add(depth, "}")

    def _field(self, field: _Field, entries: dict[str, _Message], *, in_oneof: bool) -> str:
        if field.type == _Field.TYPE_GROUP:
            raise Unprintable(f"group field {field.name}")
        entry = entries.get(field.type_name.rsplit(".", 1)[-1]) if field.type_name else None
        if entry is not None and field.label == _Field.LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            declaration = f"map<{_type(key)}, {_type(value)}> {field.name} = {field.number}"
        else:
            declaration = f"{_type(field)} {field.name} = {field.number}"
            label = self._label(field, in_oneof=in_oneof)
            if label:
                declaration = f"{label} {declaration}"
        options = []
        if field.HasField("default_value"):
            options.append(f"default = {_default(field)}")
        if field.HasField("json_name") and field.json_name != default_json_name(field.name):
            options.append(f"json_name = {json.dumps(field.json_name)}")
        options += _options(field.options)
        return declaration + (f" [{', '.join(options)}]" if options else "")

    def _label(self, field: _Field, *, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if self.proto3:
            if field.proto3_optional:
                return "optional"
            return "repeated" if field.label == _Field.LABEL_REPEATED else ""
        return _LABELS[field.label]

    def _reserved(
        self, ranges: Iterable[tuple[int, int]], names: Iterable[str], depth: int
    ) -> None:
        written = [_range(start, end) for start, end in ranges]
        if written:
            self.add(depth, f"reserved {', '.join(written)};")
        quoted = [json.dumps(name) for name in names]
        if quoted:
            self.add(depth, f"reserved {', '.join(quoted)};")

    def enum(self, enum_type: _Enum, depth: int) -> None:
        self.add(depth, f"enum {enum_type.name} {{")
        for option in _options(enum_type.options):
            self.add(depth + 1, f"option {option};")
        for value in enum_type.value:
            options = _options(value.options)
            suffix = f" [{', '.join(options)}]" if options else ""
            self.add(depth + 1, f"{value.name} = {value.number}{suffix};")
        # Enum reserved ranges are inclusive at both ends.
        self._reserved(
            ((r.start, r.end) for r in enum_type.reserved_range), enum_type.reserved_name, depth + 1
        )
        self.add(depth, "}")

    def extensions(self, extensions: Iterable[_Field], depth: int) -> None:
        fields = list(extensions)
        for extendee in dict.fromkeys(field.extendee for field in fields):
            self.add(depth, f"extend {extendee} {{")
            for field in fields:
                if field.extendee == extendee:
                    self.add(depth + 1, self._field(field, {}, in_oneof=False) + ";")
            self.add(depth, "}")

    def service(self, service: descriptor_pb2.ServiceDescriptorProto) -> None:
        self.add(0, f"service {service.name} {{")
        for option in _options(service.options):
            self.add(1, f"option {option};")
        for method in service.method:
            request = ("stream " if method.client_streaming else "") + method.input_type
            response = ("stream " if method.server_streaming else "") + method.output_type
            options = _options(method.options)
            body = (
                " {\n" + "".join(f"    option {o};\n" for o in options) + "  }" if options else ";"
            )
            self.add(1, f"rpc {method.name} ({request}) returns ({response}){body}")
        self.add(0, "}")


def _type(field: _Field) -> str:
    scalar = _SCALARS.get(field.type)
    return scalar if scalar is not None else field.type_name


def _range(start: int, end: int) -> str:
    if start == end:
        return str(start)
    return f"{start} to {'max' if end >= _MAX_FIELD_NUMBER else end}"


def _default(field: _Field) -> str:
    """A proto2 default as written in .proto (the descriptor keeps it as text)."""
    if field.type == _Field.TYPE_STRING:
        return json.dumps(field.default_value)
    if field.type == _Field.TYPE_BYTES:
        # The descriptor holds C-escaped bytes already.
        return f'"{field.default_value}"'
    return field.default_value


def _options(options: Message) -> list[str]:
    """The options set on a descriptor, as ``name = value``."""
    written = []
    for field, value in options.ListFields():
        if field.is_extension or field.is_repeated:
            raise Unprintable(f"option {field.full_name}")
        written.append(f"{field.name} = {_option_value(field, value)}")
    return written


def _option_value(field: Any, value: Any) -> str:
    if field.type == field.TYPE_ENUM:
        return str(field.enum_type.values_by_number[value].name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    raise Unprintable(f"option {field.name} of type {type(value).__name__}")


def default_json_name(name: str) -> str:
    """protoc's default ``json_name``: lowerCamelCase, underscores dropped."""
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])
