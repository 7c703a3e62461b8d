"""`source.kafka.properties` / `sink.kafka.properties`: what the one spec parser accepts,
refuses (owned keys, secrets in clear, malformed references, too many), and how the
properties travel through the proto and the stored form."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.kafka_properties import (
    OWNED_PROPERTIES,
    Reference,
    is_secret_key,
    parse_reference,
)
from lockgate.common.model.limits import MAX_KAFKA_PROPERTIES, check_request_limits
from lockgate.common.model.pipeline_spec import parse_pipeline_spec, validate_pipeline_spec
from lockgate.common.model.proto import sink_properties_from_proto, spec_from_proto, spec_to_proto
from lockgate.v1 import common_pb2

SECRET = "s3cr3t-do-not-print"


def _raw(source_props: Any = None, sink_props: Any = None) -> dict[str, Any]:
    source: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:9092", "topics": ["input"]}
    sink: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:9092", "topic": "output"}
    if source_props is not None:
        source["properties"] = source_props
    if sink_props is not None:
        sink["properties"] = sink_props
    return {"name": "p", "source": {"kafka": source}, "sink": {"kafka": sink}}


def _fields(raw: dict[str, Any]) -> dict[str, str]:
    return {v.field: f"{v.description}; {v.fix}" for v in validate_pipeline_spec(raw)}


def test_properties_are_kept_as_written_with_scalars_as_text() -> None:
    spec = parse_pipeline_spec(
        _raw(
            {"security.protocol": "SASL_SSL", "fetch.wait.max.ms": 50, "check.crcs": True},
            {"sasl.password": "${file:/etc/lockgate/kafka.properties:password}"},
        )
    )
    assert dict(spec.source.properties) == {
        "security.protocol": "SASL_SSL",
        "fetch.wait.max.ms": "50",
        "check.crcs": "true",
    }
    assert dict(spec.sink.properties) == {
        "sasl.password": "${file:/etc/lockgate/kafka.properties:password}"
    }
    # Stored form and proto round-trip to the same spec.
    assert parse_pipeline_spec(spec.to_json()) == spec
    assert spec_from_proto(spec_to_proto(spec)) == spec


def test_a_spec_without_properties_stores_what_earlier_versions_stored() -> None:
    stored = parse_pipeline_spec(_raw()).to_json()
    assert "properties" not in stored["source"]["kafka"]
    assert "properties" not in stored["sink"]["kafka"]


@pytest.mark.parametrize("key", sorted(OWNED_PROPERTIES))
def test_every_owned_key_is_refused_naming_it_and_why(key: str) -> None:
    found = _fields(_raw(sink_props={key: "x"}))
    message = found[f"sink.kafka.properties[{key!r}]"]
    assert "set by Lockgate" in message and OWNED_PROPERTIES[key] in message


def test_owned_keys_are_refused_whatever_their_case() -> None:
    assert "source.kafka.properties['Isolation.Level']" in _fields(
        _raw({"Isolation.Level": "read_uncommitted"})
    )


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
    ],
)
def test_a_secret_in_clear_is_refused_without_echoing_it(key: str) -> None:
    violations = validate_pipeline_spec(_raw(sink_props={key: SECRET}))
    assert [v.field for v in violations] == [f"sink.kafka.properties[{key!r}]"]
    text = str(violations[0])
    assert SECRET not in text
    assert "${env:NAME}" in text and "${file:" in text


def test_secret_keys_are_recognised_by_suffix_too() -> None:
    assert is_secret_key("some.new.password") and is_secret_key("foo.secret")
    assert not is_secret_key("sasl.username") and not is_secret_key("ssl.ca.location")


def test_references_parse_and_malformed_ones_are_refused() -> None:
    assert parse_reference("${env:KAFKA_PW}") == Reference("env", "KAFKA_PW")
    assert parse_reference("${file:/etc/k.properties:pw}") == Reference(
        "file", "/etc/k.properties", "pw"
    )
    assert parse_reference("plain") is None
    for bad in ("${env:9x}", "${file:relative.properties:pw}", "${file:/etc/k}", "a${env:X}"):
        with pytest.raises(ValueError):
            parse_reference(bad)
    found = _fields(_raw(sink_props={"sasl.password": "pre-${env:X}"}))
    assert "not one reference" in found["sink.kafka.properties['sasl.password']"]


def test_bad_keys_values_and_counts_are_refused() -> None:
    found = _fields(_raw({"bad key": "x", "stats_cb": "x", "linger.ms": "", "client.id": ["x"]}))
    assert set(found) == {
        "source.kafka.properties",
        "source.kafka.properties['stats_cb']",
        "source.kafka.properties['linger.ms']",
        "source.kafka.properties['client.id']",
    }
    too_many = {f"p{i}.x": "1" for i in range(MAX_KAFKA_PROPERTIES + 1)}
    assert "more than the limit" in _fields(_raw(too_many))["source.kafka.properties"]
    assert "must be a mapping" in _fields(_raw("security.protocol=SSL"))["source.kafka.properties"]


def test_request_limits_bound_the_proto_map() -> None:
    spec = common_pb2.PipelineSpec(
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(
                properties={f"p{i}": "1" for i in range(MAX_KAFKA_PROPERTIES + 1)}
            )
        )
    )
    with pytest.raises(InvalidArgument, match=f"limit of {MAX_KAFKA_PROPERTIES}"):
        check_request_limits(spec)


def test_commit_calls_check_their_sink_properties_as_the_parser_does() -> None:
    assert sink_properties_from_proto({"sasl.password": "${env:PW}"}) == {
        "sasl.password": "${env:PW}"
    }
    with pytest.raises(InvalidArgument) as info:
        sink_properties_from_proto({"sasl.password": SECRET})
    assert SECRET not in str(info.value)
    assert info.value.violations[0].field == "sink_properties['sasl.password']"
