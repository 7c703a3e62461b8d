"""Pipeline files of ``lockgate pipeline create -f``: YAML or JSON read as a
``lockgate.v1.PipelineSpec``.

A file has the shape of the proto message with two conveniences: enum values may be written
short and lower-case (``delivery: exactly_once``, ``starting_offsets: earliest``), and
``format: json`` stands for ``format: {value_format: json}``. Every unknown key and enum
value is reported at once (``SpecFileError``). The file also says which values it wrote
(``PipelineFile.written``), zeros included, which the proto alone cannot: the CLI's
``check_spec`` needs it to refuse a written ``interval_ms: 0`` that the wire would read as
"unset". The fields themselves are checked by the one parser, ``lockgate.common.model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from lockgate.common.model.kafka_properties import property_text
from lockgate.v1 import common_pb2


class SpecFileError(ValueError):
    """A pipeline file cannot be read as a PipelineSpec; the message names the field."""


def _enum_name(field: FieldDescriptor, value: Any, path: str, errors: list[str]) -> Any:
    if not isinstance(value, str):
        return value
    assert field.enum_type is not None, "called for enum fields only"
    names = [v.name for v in field.enum_type.values]
    wanted = value.strip().upper().replace("-", "_")
    for name in names:
        if name == wanted or name.endswith(f"_{wanted}"):
            return name
    choices = ", ".join(
        n.removeprefix(_common_prefix(names)).lower()
        for n in names
        if not n.endswith("_UNSPECIFIED")
    )
    errors.append(f"{path}: {value!r} is not one of: {choices}")
    return value


def _common_prefix(names: list[str]) -> str:
    unspecified = next((n for n in names if n.endswith("_UNSPECIFIED")), "")
    return unspecified.removesuffix("UNSPECIFIED")


def _normalize(descriptor: Descriptor, raw: Any, path: str, errors: list[str]) -> Any:
    """Expand the file's shorthands into the proto JSON mapping of `descriptor`; every
    unknown key and enum value is added to `errors` (all of them, not the first)."""
    if descriptor.full_name == "lockgate.v1.FormatSpec" and isinstance(raw, str):
        raw = {"value_format": raw}
    if not isinstance(raw, Mapping):
        return raw
    result: dict[str, Any] = {}
    for key, value in raw.items():
        field = descriptor.fields_by_name.get(str(key))
        where = f"{path}.{key}" if path else str(key)
        if field is None:
            known = ", ".join(descriptor.fields_by_name)
            errors.append(f"{where}: unknown field; {descriptor.name} has: {known}")
            continue
        if field.type == FieldDescriptor.TYPE_ENUM:
            value = (
                [_enum_name(field, v, where, errors) for v in value]
                if isinstance(value, list)
                else _enum_name(field, value, where, errors)
            )
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            # A map (Kafka properties): its keys are data, not fields; the parser checks them.
            if isinstance(value, Mapping):
                value = {k: property_text(v) for k, v in value.items()}
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
            if isinstance(value, list):
                value = [_normalize(field.message_type, v, f"{where}[]", errors) for v in value]
            else:
                value = _normalize(field.message_type, value, where, errors)
        result[str(key)] = value
    return result


@dataclass(frozen=True)
class PipelineFile:
    """A pipeline file read as a PipelineSpec, with what the file wrote itself."""

    spec: common_pb2.PipelineSpec
    written: frozenset[str]
    """Dotted paths of every value the file sets, zeros included (the proto cannot tell
    a written 0 from an absent field; `check_spec` needs to)."""


def _written_paths(normalized: Any, path: str = "") -> set[str]:
    if not isinstance(normalized, Mapping):
        return {path} if path else set()
    found: set[str] = set()
    for key, value in normalized.items():
        found |= _written_paths(value, f"{path}.{key}" if path else str(key))
    return found


def _parse_file_mapping(raw: Any) -> PipelineFile:
    if not isinstance(raw, Mapping):
        raise SpecFileError("a pipeline file must hold a mapping (name, source, sink, ...)")
    errors: list[str] = []
    normalized = _normalize(common_pb2.PipelineSpec.DESCRIPTOR, raw, "", errors)
    if errors:
        # Several go one per line under the file's name.
        raise SpecFileError(errors[0] if len(errors) == 1 else "\n  " + "\n  ".join(errors))
    spec = common_pb2.PipelineSpec()
    try:
        json_format.ParseDict(normalized, spec)
    except json_format.ParseError as exc:
        raise SpecFileError(str(exc)) from None
    return PipelineFile(spec=spec, written=frozenset(_written_paths(normalized)))


def spec_from_mapping(raw: Any) -> common_pb2.PipelineSpec:
    """A PipelineSpec from a parsed pipeline file; SpecFileError names the bad field."""
    return _parse_file_mapping(raw).spec


def read_pipeline_file(path: Path) -> PipelineFile:
    """Read a YAML or JSON pipeline file; SpecFileError names the bad field."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecFileError(f"{path} is not valid YAML/JSON: {exc}") from None
    try:
        return _parse_file_mapping(raw)
    except SpecFileError as exc:
        raise SpecFileError(f"{path}: {exc}") from None


def read_spec_file(path: Path) -> common_pb2.PipelineSpec:
    """Read a YAML or JSON pipeline file as a PipelineSpec."""
    return read_pipeline_file(path).spec
