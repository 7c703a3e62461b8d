"""A consumer that cannot be built from the source's Kafka properties fails the batch with a
SourceError naming the property field and librdkafka's reason, never a resolved secret."""

from __future__ import annotations

import pytest

from lockgate.executor.dataplane.spark.offsets import topic_partitions
from lockgate.executor.errors import SourceError

SECRET = "hunter2-not-a-number"


def test_a_refused_consumer_setting_is_a_source_error_naming_the_properties(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKGATE_TEST_SECRET", SECRET)
    properties = {"sasl.password": "${env:LOCKGATE_TEST_SECRET}", "fetch.wait.max.ms": "soon"}
    with pytest.raises(SourceError) as info:
        topic_partitions(bootstrap_servers="127.0.0.1:1", topic="t", properties=properties)
    message = str(info.value)
    assert "source.kafka.properties" in message and "fetch.wait.max.ms" in message
    assert SECRET not in message
