"""Kafka client properties of a pipeline side (`source.kafka.properties`, `sink.kafka.properties`).

As Spark's `kafka.*` options, Kafka Connect's `consumer.override.*` and Flink's `properties.*`:
librdkafka property names and string values, applied to every client of that side (the
source consumer, the sink producer, the admin and ListOffsets calls, the commit and abort
path). What this module decides, without reading anything:

- which keys Lockgate owns and refuses (`OWNED_PROPERTIES`, each with why);
- which keys hold secrets (`is_secret_key`): their values must be references, never
  literals, so no secret sits in SQL, in a status or in a log;
- what a reference is: `${env:NAME}` or `${file:/path/to/file:key}` (Kafka's KIP-297
  config providers; the file is a Java properties file, `key` its property). The whole
  value is one reference; it is stored and shown as written and resolved only where a
  Kafka client is built (`lockgate.common.kafka_config`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.common.model.limits import MAX_KAFKA_PROPERTIES, MAX_STRING_CHARS
from lockgate.common.model.spec_checker import SpecChecker

KafkaProperties = tuple[tuple[str, str], ...]
"""A side's properties, sorted by key (hashable, so specs stay frozen values)."""

HIDDEN = "[hidden]"
"""What a secret's value is shown as wherever it could otherwise be printed."""

OWNED_PROPERTIES: Mapping[str, str] = {
    "bootstrap.servers": "Lockgate connects to the side's `bootstrap_servers` field: set that",
    "metadata.broker.list": "Lockgate connects to the side's `bootstrap_servers` field",
    "transactional.id": "Lockgate names every transaction (`sink.kafka.transactional_id_prefix`)",
    "enable.idempotence": "exactly-once needs the idempotent producer Lockgate turns on",
    "transaction.timeout.ms": "set `sink.kafka.transaction_timeout_ms` instead",
    "acks": "transactions need acks=all, which Lockgate sets",
    "isolation.level": "the source reads read_committed, or it would read aborted records",
    "enable.auto.commit": "offsets live in Lockgate's checkpoints, never in a consumer group",
    "enable.auto.offset.store": "offsets live in Lockgate's checkpoints",
    "enable.partition.eof": "the source reader finds the end of a range by it",
    "group.id": "the source reads assigned partitions; offsets live in checkpoints",
    "auto.offset.reset": "set `source.kafka.starting_offsets` instead",
    "statistics.interval.ms": "the sink reads the producer id and epoch from these statistics",
    "client.dns.lookup": "a Java client property; librdkafka has none",
}
"""Keys Lockgate sets itself: a spec that sets one is refused, naming the key and why."""

_CALLBACKS = frozenset(
    {"error_cb", "stats_cb", "throttle_cb", "oauth_cb", "on_delivery", "logger", "log_cb"}
)
"""confluent-kafka's Python callbacks: code, not properties."""

_SECRET_KEYS = frozenset(
    {
        "sasl.jaas.config",
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.key.pem",
        "ssl.keystore.key",
        "ssl_key",
    }
)

_KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")
_REFERENCE = re.compile(r"^\$\{(?P<provider>env|file):(?P<target>[^{}]+)\}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_secret_key(key: str) -> bool:
    """Whether `key` holds a secret (a password, a private key, a JAAS line)."""
    lowered = key.lower()
    return (
        lowered in _SECRET_KEYS
        or lowered.endswith(".password")
        or lowered.endswith(".secret")
        or lowered.endswith(".jaas.config")
    )


@dataclass(frozen=True)
class Reference:
    """A parsed `${env:NAME}` or `${file:/path:key}` value."""

    provider: str
    """`env` or `file`."""
    name: str
    """The environment variable (env), or the file's path (file)."""
    key: str = ""
    """The property of the file that holds the value (file only)."""


def parse_reference(value: str) -> Reference | None:
    """The reference `value` is, or None for a literal; ValueError for a malformed one."""
    match = _REFERENCE.match(value)
    if match is None:
        if "${" in value:
            raise ValueError(
                "is not one reference: write the whole value as ${env:NAME} or"
                " ${file:/path/to/file:key}"
            )
        return None
    target = match["target"]
    if match["provider"] == "env":
        if not _ENV_NAME.match(target):
            raise ValueError(f"${{env:{target}}} does not name an environment variable")
        return Reference("env", target)
    path, _, key = target.rpartition(":")
    if not path.startswith("/") or not key:
        raise ValueError(
            "a file reference is ${file:/absolute/path/to/file:key} (a Java properties file"
            " and the property holding the value)"
        )
    return Reference("file", path, key)


def property_text(value: object) -> object:
    """A property value as the text Kafka reads (`linger.ms: 5` is "5", `true` is "true");
    anything but a number or a boolean is returned as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def parse_kafka_properties(
    c: SpecChecker, kafka: Mapping[str, object], path: str, *, side: str
) -> KafkaProperties | None:
    """`<path>.properties`: a map of librdkafka property names to string values (numbers
    and booleans are written as text), at most `MAX_KAFKA_PROPERTIES` entries, no key
    Lockgate owns, every secret a reference. Records each violation in `c`; None if any."""
    field = f"{path}.properties"
    raw = kafka.get("properties")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        c.add(field, "must be a mapping of property names to values", "write `key: value` pairs")
        return None
    if len(raw) > MAX_KAFKA_PROPERTIES:
        c.add(
            field,
            f"has {len(raw)} entries, more than the limit of {MAX_KAFKA_PROPERTIES}",
            f"set at most {MAX_KAFKA_PROPERTIES} properties",
        )
        return None
    before = len(c.violations)
    found: dict[str, str] = {}
    for key, value in raw.items():
        text = _property_text(c, field, key, value, side=side)
        if text is not None:
            found[str(key)] = text
    if len(c.violations) > before:
        return None
    return tuple(sorted(found.items()))


def _property_text(
    c: SpecChecker, field: str, key: object, value: object, *, side: str
) -> str | None:
    if not isinstance(key, str) or not _KEY_PATTERN.match(key):
        shown = key if isinstance(key, str) and len(key) <= 64 else f"{str(key)[:64]}..."
        c.add(
            field, f"{shown!r} is not a Kafka property name", "use names like `security.protocol`"
        )
        return None
    where = f"{field}[{key!r}]"
    why = OWNED_PROPERTIES.get(key.lower())
    if why is not None:
        c.add(where, f"is set by Lockgate on every {side} client: {why}", "remove it")
        return None
    if key in _CALLBACKS:
        c.add(where, "is a confluent-kafka Python callback, not a property", "remove it")
        return None
    value = property_text(value)
    if not isinstance(value, str) or not value:
        c.add(where, "must be a non-empty string", f"set `{key}` to text")
        return None
    if len(value) > MAX_STRING_CHARS:
        c.add(
            where,
            f"has {len(value)} characters, more than the limit of {MAX_STRING_CHARS}",
            f"shorten it to at most {MAX_STRING_CHARS} characters",
        )
        return None
    try:
        reference = parse_reference(value)
    except ValueError as exc:
        c.add(where, str(exc), "see README, Pipelines: Kafka client properties")
        return None
    if reference is None and is_secret_key(key):
        # The value is never echoed: it is the secret.
        c.add(
            where,
            f"holds a secret written in clear ({HIDDEN}); Lockgate never stores one",
            "use ${env:NAME} or ${file:/path/to/file:key}, resolved where the client is built",
        )
        return None
    return value


__all__ = [
    "HIDDEN",
    "OWNED_PROPERTIES",
    "KafkaProperties",
    "Reference",
    "is_secret_key",
    "parse_kafka_properties",
    "parse_reference",
    "property_text",
]
