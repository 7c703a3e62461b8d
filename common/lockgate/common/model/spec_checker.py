"""Walking a raw pipeline config and collecting what is wrong with it, field by field.

`SpecChecker` is the pipeline-spec parser's (`pipeline_spec`) reader of one field at a time:
it never raises, it records a `SpecViolation` (field path, what is wrong, how to fix it) and
returns None, so the parser reports every violation of a config in one answer.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lockgate.common.errors import FieldViolation, InvalidArgument
from lockgate.common.model.limits import MAX_BOOTSTRAP_SERVERS, MAX_STRING_CHARS

_E = TypeVar("_E", bound=enum.StrEnum)

_SERVER_PATTERN = re.compile(r"^[^\s,:]+:(?P<port>[0-9]{1,5})$")


@dataclass(frozen=True)
class SpecViolation:
    """One invalid config field: where it is, what is wrong, and how to fix it."""

    field: str
    """Dotted path into the config, e.g. `sink.kafka.topic` or `source.kafka.topics[1]`."""
    description: str
    """What is wrong with the value."""
    fix: str
    """What to write instead."""

    def __str__(self) -> str:
        return f"{self.field or '<config>'}: {self.description}; fix: {self.fix}"

    def to_field_violation(self) -> FieldViolation:
        """The `google.rpc.BadRequest` form: the fix is folded into the description."""
        return FieldViolation(field=self.field, description=f"{self.description}; fix: {self.fix}")


def invalid_spec(violations: Sequence[SpecViolation]) -> InvalidArgument:
    """Return the InvalidArgument that reports every violation of a pipeline config."""
    return InvalidArgument(
        "invalid pipeline config: " + "; ".join(str(v) for v in violations),
        violations=[v.to_field_violation() for v in violations],
        reason="INVALID_PIPELINE_CONFIG",
    )


class SpecChecker:
    """Collects violations while walking a raw config; never raises."""

    def __init__(self) -> None:
        self.violations: list[SpecViolation] = []

    def add(self, field: str, description: str, fix: str) -> None:
        self.violations.append(SpecViolation(field=field, description=description, fix=fix))

    def mapping(
        self, raw: Mapping[str, Any], key: str, path: str, *, required: bool
    ) -> Mapping[str, Any] | None:
        if key not in raw or raw[key] is None:
            if required:
                self.add(path, "is missing", f"add a `{path}` section")
            return None
        value = raw[key]
        if not isinstance(value, Mapping):
            self.add(
                path, f"must be a mapping, got {type(value).__name__}", "write key: value pairs"
            )
            return None
        return value

    def unknown_keys(self, raw: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
        for key in raw:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                self.add(
                    where, "is not a known field", f"remove it or use one of: {', '.join(allowed)}"
                )

    def string(
        self,
        raw: Mapping[str, Any],
        key: str,
        path: str,
        *,
        required: bool,
        pattern: re.Pattern[str] | None = None,
        pattern_fix: str = "",
        max_chars: int = MAX_STRING_CHARS,
    ) -> str | None:
        if key not in raw or raw[key] is None:
            if required:
                self.add(path, "is missing", f"set `{path}`")
            return None
        value = raw[key]
        if not isinstance(value, str) or not value.strip():
            self.add(path, "must be a non-empty string", f"set `{path}` to a string")
            return None
        # Before any pattern: the length is what a hostile value makes expensive.
        if len(value) > max_chars:
            self.add(
                path,
                f"has {len(value)} characters, more than the limit of {max_chars}",
                f"shorten it to at most {max_chars} characters",
            )
            return None
        if pattern is not None and not pattern.match(value):
            self.add(path, f"{value!r} is not valid", pattern_fix)
            return None
        return value

    def bootstrap_servers(self, kafka: Mapping[str, Any], path: str) -> str | None:
        """`<path>.bootstrap_servers`: required, `host:port[,host:port...]`, each port
        1-65535, at most `MAX_BOOTSTRAP_SERVERS` entries."""
        field = f"{path}.bootstrap_servers"
        value = self.string(kafka, "bootstrap_servers", field, required=True)
        if value is None:
            return None
        servers = value.split(",")
        fix = "write host:port[,host:port...] with ports 1-65535, e.g. 127.0.0.1:9092"
        if len(servers) > MAX_BOOTSTRAP_SERVERS:
            self.add(
                field,
                f"lists {len(servers)} servers, more than the limit of {MAX_BOOTSTRAP_SERVERS}",
                f"list at most {MAX_BOOTSTRAP_SERVERS}: a few brokers are enough to bootstrap",
            )
            return None
        for server in servers:
            match = _SERVER_PATTERN.match(server)
            if match is None:
                self.add(field, f"{server!r} is not host:port", fix)
                return None
            if not 1 <= int(match["port"]) <= 65535:
                self.add(field, f"port {match['port']} of {server!r} is not 1-65535", fix)
                return None
        return value

    def choice(
        self,
        raw: Mapping[str, Any],
        key: str,
        path: str,
        enum_type: type[_E],
        default: _E | None,
    ) -> _E | None:
        choices = ", ".join(e.value for e in enum_type)
        if key not in raw or raw[key] is None:
            if default is None:
                self.add(path, "is missing", f"set `{path}` to one of: {choices}")
            return default
        value = raw[key]
        try:
            return enum_type(value)
        except ValueError:
            self.add(path, f"{value!r} is not supported", f"use one of: {choices}")
            return None

    def positive_int(
        self,
        raw: Mapping[str, Any],
        key: str,
        path: str,
        default: int,
        minimum: int,
        *,
        maximum: int | None = None,
    ) -> int | None:
        if key not in raw or raw[key] is None:
            return default
        value = raw[key]
        # bool is an int in Python; `tasks_max: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(path, f"must be an integer, got {value!r}", f"set `{path}` to a whole number")
            return None
        if value < minimum:
            self.add(
                path, f"must be >= {minimum}, got {value}", f"set `{path}` to {minimum} or more"
            )
            return None
        if maximum is not None and value > maximum:
            self.add(
                path,
                f"must be <= {maximum}, got {value}",
                f"set `{path}` between {minimum} and {maximum}",
            )
            return None
        return value
