"""Resolving `${env:...}` / `${file:...}` references where a Kafka client is built, and
mapping librdkafka's security properties to kafka-python's (the commit path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.common.kafka_config import (
    SecretReferenceError,
    java_properties,
    kafka_python_settings,
    redact,
    resolve_properties,
)

SECRET = "pa:ss=wo rd#1"


def test_env_and_file_references_resolve_and_literals_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "kafka.properties"
    secrets.write_text(f"# credentials\nusername = lockgate\npassword={SECRET}\n")
    monkeypatch.setenv("LOCKGATE_TEST_USER", "from-env")
    resolved = resolve_properties(
        {
            "sasl.username": "${env:LOCKGATE_TEST_USER}",
            "sasl.password": f"${{file:{secrets}:password}}",
            "security.protocol": "SASL_SSL",
        }
    )
    assert resolved == {
        "sasl.username": "from-env",
        "sasl.password": SECRET,
        "security.protocol": "SASL_SSL",
    }


def test_an_unresolvable_reference_names_the_property_never_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCKGATE_NOT_SET", raising=False)
    with pytest.raises(SecretReferenceError, match=r"'sasl\.password'.*LOCKGATE_NOT_SET"):
        resolve_properties({"sasl.password": "${env:LOCKGATE_NOT_SET}"})
    with pytest.raises(SecretReferenceError, match="cannot be read here"):
        resolve_properties({"sasl.password": f"${{file:{tmp_path}/missing:pw}}"})
    other = tmp_path / "other.properties"
    other.write_text(f"user={SECRET}\n")
    with pytest.raises(SecretReferenceError, match="no property 'pw'") as info:
        resolve_properties({"sasl.password": f"${{file:{other}:pw}}"})
    assert SECRET not in str(info.value)


def test_java_properties_reads_separators_comments_and_continuations() -> None:
    text = "! comment\na=1\nb : 2\nc = x\\\n    y\n\nempty\n"
    assert java_properties(text) == {"a": "1", "b": "2", "c": "xy", "empty": ""}


def test_librdkafka_security_maps_to_kafka_python() -> None:
    settings = kafka_python_settings(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "scram-sha-512",
            "sasl.username": "lockgate",
            "sasl.password": SECRET,
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
            "linger.ms": "5",
        }
    )
    assert settings == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "lockgate",
        "sasl_plain_password": SECRET,
        "ssl_cafile": "/ca.pem",
        "ssl_check_hostname": False,
    }


def test_redact_hides_resolved_secrets_only() -> None:
    resolved = {"sasl.password": SECRET, "sasl.username": "lockgate"}
    assert redact(f"auth as lockgate with {SECRET} failed", resolved) == (
        "auth as lockgate with [hidden] failed"
    )
