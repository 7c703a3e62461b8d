"""A pipeline side's Kafka properties made ready for a client, where that client is built.

The spec holds the properties as written (`lockgate.common.model.kafka_properties`): secrets
are references, `${env:NAME}` or `${file:/path/to/file:key}` (Kafka's KIP-297 config
providers). This module is the one place that reads them, at the moment a client is built,
in the process that builds it (the executor and its Spark workers for the consumer, the
producers and the commits; the coordinator for its metadata, ListOffsets and leader commits).
A resolved value lives only in that client's settings: it is never stored, logged or put
in an error message (`redact` replaces it with `[hidden]` in any text that could carry it).

Two client libraries speak to Kafka here: confluent-kafka (librdkafka names, used as they
are) and kafka-python, whose network layer the commit path (`kafka_transactions`) and the
slot listing use; `kafka_python_settings` maps the librdkafka security properties to its
arguments, in one table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lockgate.common.model.kafka_properties import HIDDEN, is_secret_key, parse_reference


class SecretReferenceError(ValueError):
    """A `${env:...}` or `${file:...}` reference could not be resolved here. The message
    names the property and the reference, never a value."""


def resolve_properties(
    properties: Mapping[str, str] | tuple[tuple[str, str], ...],
) -> dict[str, str]:
    """The properties with every reference replaced by what it points to, read now.
    `SecretReferenceError` naming the property and the reference if one cannot be read."""
    items = properties.items() if isinstance(properties, Mapping) else properties
    return {key: _resolve(key, value) for key, value in items}


def _resolve(key: str, value: str) -> str:
    reference = parse_reference(value)
    if reference is None:
        return value
    if reference.provider == "env":
        found = os.environ.get(reference.name)
        if found is None:
            raise SecretReferenceError(
                f"property {key!r}: {value} names environment variable {reference.name}, which"
                " is not set in this process; set it where the Kafka client runs"
            )
        return found
    try:
        text = Path(reference.name).read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretReferenceError(
            f"property {key!r}: {value} cannot be read here ({exc.strerror or exc});"
            " the file must exist where the Kafka client runs"
        ) from None
    found = java_properties(text).get(reference.key)
    if found is None:
        raise SecretReferenceError(
            f"property {key!r}: {value}: the file has no property {reference.key!r}"
        )
    return found


def java_properties(text: str) -> dict[str, str]:
    """The `key=value` (or `key: value`) pairs of a Java properties file: `#`/`!`
    comments, blank lines and surrounding spaces skipped; a line ending in a backslash
    continues on the next one."""
    found: dict[str, str] = {}
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not logical and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            logical += stripped[:-1]
            continue
        logical += stripped
        separators = [i for i in (logical.find("="), logical.find(":")) if i >= 0]
        if separators:
            cut = min(separators)
            found[logical[:cut].strip()] = logical[cut + 1 :].strip()
        else:
            found[logical] = ""
        logical = ""
    return found


def redact(text: str, resolved: Mapping[str, str]) -> str:
    """`text` with the value of every secret property in `resolved` replaced by
    `[hidden]` (for an error message of a client built with them)."""
    for key, value in resolved.items():
        if is_secret_key(key) and value:
            text = text.replace(value, HIDDEN)
    return text


# librdkafka name -> kafka-python argument, for the settings its network layer honours.
_KAFKA_PYTHON_NAMES: Mapping[str, str] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "client.id": "client_id",
}
_UPPER_CASE = frozenset({"security_protocol", "sasl_mechanism"})


def kafka_python_settings(resolved: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python's connection arguments for resolved librdkafka properties: security
    (`security.protocol`, `sasl.mechanism(s)`, `sasl.username`/`sasl.password` for PLAIN
    and SCRAM-SHA-256/512, `ssl.*.location`, `ssl.key.password`,
    `ssl.endpoint.identification.algorithm`) and `client.id`. Other properties tune
    librdkafka only and do not apply to the commit path's few requests."""
    settings: dict[str, Any] = {}
    for key, value in resolved.items():
        name = _KAFKA_PYTHON_NAMES.get(key)
        if name is not None:
            settings[name] = value.upper() if name in _UPPER_CASE else value
    algorithm = resolved.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        settings["ssl_check_hostname"] = algorithm.lower() == "https"
    return settings


__all__ = [
    "SecretReferenceError",
    "java_properties",
    "kafka_python_settings",
    "redact",
    "resolve_properties",
]
