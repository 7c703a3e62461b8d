"""Parse, validate and normalise Protobuf schemas (``schemaType: PROTOBUF``).

A schema arrives as ``.proto`` text, or (as confluent-kafka's serializers send it) as a
base64 ``FileDescriptorProto``; Confluent's ``ProtobufSchema`` accepts both. Text is compiled
by protoc itself (``grpc_tools``, in process) into a ``FileDescriptorProto``; a descriptor is
checked by building it into a ``DescriptorPool``. Either way a syntax or linking error is
42201 with protoc's message and position.

References are imports: each reference's name is the import path (``import "money.proto";``
needs ``{"name": "money.proto", "subject": ..., "version": ...}``), as Confluent's
``ProtobufSchema`` resolves them. ``google/protobuf/*.proto`` (the well-known types) need no
reference: protoc's bundled copies serve them.

Identity: the compiled ``FileDescriptorProto`` without what does not change the schema (file
name, source positions, comments, whitespace, default ``json_name``), serialized
deterministically; the same schema written another way, or sent as a descriptor, gets the same
fingerprint.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from grpc_tools import protoc

from lockgate.schema_registry.errors import InvalidSchemaError
from lockgate.schema_registry.protobuf_text import Unprintable, default_json_name, proto_text

#: The name the schema's own file gets in its descriptor (Confluent's default name).
SCHEMA_FILE_NAME = "default"
#: Imports served without a reference: protoc's bundled well-known types.
WELL_KNOWN_PREFIX = "google/protobuf/"
#: protoc's bundled copies of the well-known types (an include path).
WELL_KNOWN_DIR = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
#: Bound on the child protoc that reads back a refused schema's errors, in seconds.
_PROTOC_TIMEOUT_S = 30


@dataclass(frozen=True)
class ProtobufModel:
    """A compiled Protobuf schema with the files it imports (what compatibility walks)."""

    #: The schema's own file, named :data:`SCHEMA_FILE_NAME`.
    file: descriptor_pb2.FileDescriptorProto
    #: Every file it imports, directly or not, dependencies first, named by import path.
    imports: tuple[descriptor_pb2.FileDescriptorProto, ...]

    def serialized(self) -> str:
        """The file as base64 ``FileDescriptorProto`` (Confluent's ``format=serialized``)."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")

    def pool(self) -> descriptor_pool.DescriptorPool:
        """A descriptor pool holding the schema and its imports (for message classes)."""
        pool = descriptor_pool.DescriptorPool()
        for imported in (*self.imports, self.file):
            pool.Add(imported)
        return pool


@dataclass(frozen=True)
class ParsedProtobufSchema:
    """A validated Protobuf schema with its canonical text and fingerprint."""

    model: ProtobufModel
    #: The text as registered (``.proto`` or base64 descriptor).
    normalized_text: str
    #: SHA-256 (hex) of "PROTOBUF " and the canonical descriptor: equal for equal schemas.
    fingerprint: str


def parse_protobuf_schema(
    text: str, *, max_bytes: int, referenced: Sequence[tuple[str, str]] = ()
) -> ParsedProtobufSchema:
    """Compile Protobuf schema text; raise 42201 with protoc's message when it is invalid.

    ``referenced`` are the ``(import path, schema text)`` pairs of the schema's references
    (theirs included, dependencies first).
    """
    if len(text.encode("utf-8")) > max_bytes:
        raise InvalidSchemaError(
            f"Invalid schema: it is larger than {max_bytes} bytes (raise --max-schema-bytes)",
            field="schema",
        )
    if not text.strip():
        raise InvalidSchemaError("Invalid schema: the schema is empty", field="schema")
    imports: list[descriptor_pb2.FileDescriptorProto] = []
    for name, referenced_text in referenced:
        if not any(known.name == name for known in imports):
            imports.append(_compile(referenced_text, name, imports, what=f"reference {name}"))
    own = _compile(text, SCHEMA_FILE_NAME, imports, what="the schema")
    needed = _needed_imports(own, imports)
    canonical = _canonical(own).SerializeToString(deterministic=True)
    return ParsedProtobufSchema(
        model=ProtobufModel(file=own, imports=needed),
        normalized_text=_canonical_text(own, imports, sent=text),
        fingerprint=hashlib.sha256(b"PROTOBUF " + canonical).hexdigest(),
    )


def _compile(
    text: str,
    name: str,
    available: Sequence[descriptor_pb2.FileDescriptorProto],
    *,
    what: str,
) -> descriptor_pb2.FileDescriptorProto:
    """One file's descriptor, named ``name``, from .proto text or a base64 descriptor."""
    stripped = text.strip()
    if _BASE64.fullmatch(stripped):
        compiled = _from_descriptor(stripped, name, available, what=what)
    else:
        compiled = _from_proto_text(text, name, available, what=what)
    compiled.ClearField("source_code_info")
    return compiled


def _from_descriptor(
    encoded: str,
    name: str,
    available: Sequence[descriptor_pb2.FileDescriptorProto],
    *,
    what: str,
) -> descriptor_pb2.FileDescriptorProto:
    """A base64 ``FileDescriptorProto``, checked by building it into a pool."""
    file = descriptor_pb2.FileDescriptorProto()
    try:
        file.ParseFromString(base64.b64decode("".join(encoded.split()), validate=True))
    except (binascii.Error, DecodeError, ValueError):
        raise InvalidSchemaError(
            f"Invalid schema: {what} is neither .proto text nor a base64 FileDescriptorProto",
            field="schema",
        ) from None
    file.name = name
    known = {imported.name: imported for imported in available}
    pool = descriptor_pool.DescriptorPool()
    for dependency in _closure(file, known, what=what):
        pool.Add(dependency)
    try:
        pool.Add(file)
        pool.FindFileByName(name)
    except (TypeError, KeyError, ValueError) as exc:
        raise InvalidSchemaError(
            f"Invalid schema: {what} is not a valid descriptor: {exc}", field="schema"
        ) from None
    return file


def _closure(
    file: descriptor_pb2.FileDescriptorProto,
    known: dict[str, descriptor_pb2.FileDescriptorProto],
    *,
    what: str,
) -> list[descriptor_pb2.FileDescriptorProto]:
    """The files ``file`` imports, transitively, dependencies first; 42201 for a missing one."""
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def visit(current: descriptor_pb2.FileDescriptorProto) -> None:
        for dependency in current.dependency:
            if dependency in seen:
                continue
            seen.add(dependency)
            found = known.get(dependency) or well_known_file(dependency)
            if found is None:
                raise _missing_import(dependency, what)
            visit(found)
            ordered.append(found)

    visit(file)
    return ordered


def well_known_file(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor of a bundled ``google/protobuf/*.proto``, or None for another name."""
    if not name.startswith(WELL_KNOWN_PREFIX) or not name.endswith(".proto"):
        return None
    module_name = name.removesuffix(".proto").replace("/", ".") + "_pb2"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    file = descriptor_pb2.FileDescriptorProto()
    file.ParseFromString(module.DESCRIPTOR.serialized_pb)
    return file


def _missing_import(name: str, what: str) -> InvalidSchemaError:
    return InvalidSchemaError(
        f'Invalid schema: {what} imports "{name}", which is not found; register it under a'
        f' subject and name it in \'references\' ({{"name": "{name}", "subject": ...,'
        ' "version": ...})',
        field="references",
    )


def _from_proto_text(
    text: str,
    name: str,
    available: Sequence[descriptor_pb2.FileDescriptorProto],
    *,
    what: str,
) -> descriptor_pb2.FileDescriptorProto:
    """Compile .proto text with protoc, its references given as a descriptor set."""
    with tempfile.TemporaryDirectory(prefix="lockgate-proto-") as workdir:
        source_dir = os.path.join(workdir, "src")
        path = os.path.join(source_dir, name)
        if os.path.isabs(name) or ".." in name.split("/"):
            raise InvalidSchemaError(
                f"Invalid schema reference: {name!r} is not a relative import path",
                field="references",
            )
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        references = os.path.join(workdir, "references.pb")
        with open(references, "wb") as handle:
            handle.write(descriptor_pb2.FileDescriptorSet(file=available).SerializeToString())
        out = os.path.join(workdir, "out.pb")
        arguments = [
            "protoc",
            f"--proto_path={source_dir}",
            f"--proto_path={WELL_KNOWN_DIR}",
            f"--descriptor_set_in={references}",
            f"--descriptor_set_out={out}",
            name,
        ]
        if protoc.main(arguments) != 0:
            raise _compile_error(arguments, source_dir, what)
        compiled = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as handle:
            compiled.ParseFromString(handle.read())
    return compiled.file[-1]


def _compile_error(arguments: Sequence[str], source_dir: str, what: str) -> InvalidSchemaError:
    """protoc's first error as 42201, with the position (line:column) it names.

    The in-process compiler writes its errors to the process's stderr, out of reach; the same
    command is run again as a child process (only for a schema already refused) to read them.
    """
    try:
        result = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", *arguments[1:]],
            capture_output=True,
            text=True,
            timeout=_PROTOC_TIMEOUT_S,
            check=False,
        )
        # Only protoc's own lines: the child may log other things (absl's warnings).
        lines = [
            line.strip()
            for line in result.stderr.splitlines()
            if line.startswith(source_dir) or line.endswith(": File not found.")
        ]
    except (OSError, subprocess.SubprocessError):
        lines = []
    for line in lines:
        missing = re.fullmatch(r"(.+): File not found\.", line)
        if missing:
            return _missing_import(missing.group(1), what)
    if not lines:
        return InvalidSchemaError(
            f"Invalid schema: {what} does not compile (protoc refused it)", field="schema"
        )
    first = lines[0].replace(source_dir + os.sep, "")
    located = re.fullmatch(r"[^:]*:(\d+):(\d+): (.*)", first)
    if located:
        first = f"line {located.group(1)} column {located.group(2)}: {located.group(3)}"
    return InvalidSchemaError(f"Invalid schema: {what} does not compile: {first}", field="schema")


def _canonical_text(
    own: descriptor_pb2.FileDescriptorProto,
    imports: Sequence[descriptor_pb2.FileDescriptorProto],
    *,
    sent: str,
) -> str:
    """The schema as canonical .proto text, checked by compiling it again; the text as sent
    when the writer cannot write it faithfully (custom options, groups, editions)."""
    try:
        printed = proto_text(own)
        again = _from_proto_text(printed, SCHEMA_FILE_NAME, imports, what="the canonical text")
    except (Unprintable, InvalidSchemaError):
        return sent.strip()
    return printed if _canonical(again) == _canonical(own) else sent.strip()


def _needed_imports(
    own: descriptor_pb2.FileDescriptorProto, available: Sequence[descriptor_pb2.FileDescriptorProto]
) -> tuple[descriptor_pb2.FileDescriptorProto, ...]:
    known = {imported.name: imported for imported in available}
    return tuple(_closure(own, known, what="the schema"))


def _canonical(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """The file without what does not change the schema (name, positions, default json_name)."""
    canonical = descriptor_pb2.FileDescriptorProto()
    canonical.CopyFrom(file)
    canonical.ClearField("name")
    canonical.ClearField("source_code_info")
    if canonical.syntax == "proto2":
        canonical.ClearField("syntax")
    messages = list(canonical.message_type)
    while messages:
        message = messages.pop()
        messages.extend(message.nested_type)
        for field in (*message.field, *message.extension):
            if field.json_name == default_json_name(field.name):
                field.ClearField("json_name")
    for extension in canonical.extension:
        if extension.json_name == default_json_name(extension.name):
            extension.ClearField("json_name")
    return canonical
