"""What changed between two pipeline specs, field by field (``lockgate pipeline apply``).

Both specs are compared in their normalised form (`PipelineSpec.to_json`, defaults filled
in), so a file that leaves out a default and a stored spec that holds it do not differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.common.model.pipeline_spec import PipelineSpec


@dataclass(frozen=True)
class SpecChange:
    """One field whose value differs: its dotted path, and the value before and after
    (None: the field is absent on that side). A list is one value."""

    field: str
    before: Any
    after: Any


def _leaves(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in document.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping):
            found.update(_leaves(value, path))  # an empty section holds no value
        else:
            found[path] = value
    return found


def spec_changes(before: PipelineSpec, after: PipelineSpec) -> list[SpecChange]:
    """Every field whose normalised value differs between `before` and `after`, by path."""
    old, new = _leaves(before.to_json()), _leaves(after.to_json())
    return [
        SpecChange(field=path, before=old.get(path), after=new.get(path))
        for path in sorted(old.keys() | new.keys())
        if old.get(path) != new.get(path)
    ]


__all__ = ["SpecChange", "spec_changes"]
