"""Hypothesis strategies for pipeline specs: every config the model's parser accepts.

Shared by the model's own tests and by each service's test that the spec it is handed is the
one the coordinator accepted (the coordinator, the executor and the CLI share one parser).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from lockgate.common.model.pipeline_spec import (
    Delivery,
    ErrorTolerance,
    RecordFormat,
    StartingOffsets,
)
from lockgate.common.model.producer_batching import (
    MAX_BATCH_SIZE,
    MAX_LINGER_MS,
    MIN_BATCH_SIZE,
    Compression,
)

_TOPIC = st.from_regex(r"\A[a-z][a-z0-9._-]{0,20}\Z")
_PREFIX = st.from_regex(r"\A[a-zA-Z0-9._-]{1,30}\Z")
_KEY_FORMATS = st.sampled_from([RecordFormat.BYTES, RecordFormat.STRING, RecordFormat.JSON])


@st.composite
def raw_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Pipeline configs the parser accepts, over every field it knows."""
    value_formats = st.sampled_from(list(RecordFormat))
    source_format, sink_format = draw(value_formats), draw(value_formats)
    registry = "http://127.0.0.1:8081"
    sink_topic = draw(_TOPIC)
    raw: dict[str, Any] = {
        "name": draw(st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z")),
        "source": {
            "kafka": {
                "bootstrap_servers": "127.0.0.1:9092",
                "topics": draw(st.lists(_TOPIC, min_size=1, max_size=3, unique=True)),
                "starting_offsets": draw(st.sampled_from(list(StartingOffsets))).value,
                "format": source_format.value,
                "key_format": draw(_KEY_FORMATS).value,
            }
        },
        "sink": {
            "kafka": {
                "bootstrap_servers": "127.0.0.1:9092,127.0.0.1:9093",
                "topic": sink_topic,
                "format": sink_format.value,
                "key_format": draw(_KEY_FORMATS).value,
            }
        },
        "delivery": draw(st.sampled_from(list(Delivery))).value,
        "checkpoint": {
            "interval_ms": draw(st.integers(1, 10**6)),
            "timeout_ms": draw(st.integers(1, 10**7)),
        },
        "tasks_max": draw(st.integers(1, 64)),
        "allow_reordering": draw(st.booleans()),
    }
    if source_format.needs_registry or draw(st.booleans()):
        raw["source"]["kafka"]["schema_registry_url"] = registry
    if sink_format.needs_registry or draw(st.booleans()):
        raw["sink"]["kafka"]["schema_registry_url"] = registry
    transform = draw(st.sampled_from(["none", "sql", "python"]))
    if transform == "sql":
        raw["transform"] = {"sql": "SELECT key, value FROM input"}
    elif transform == "python":
        raw["transform"] = {"python": "pkg.mod:fn"}
    if draw(st.booleans()):
        raw["sink"]["kafka"]["transactional_id_prefix"] = draw(_PREFIX)
    # The producer batching fields, each unset or anywhere in its bounds (0 ms included).
    linger = st.integers(0, MAX_LINGER_MS)
    where = draw(st.sampled_from(["unset", "field", "property"]))
    if where == "field":
        raw["sink"]["kafka"]["linger_ms"] = draw(linger)
    elif where == "property":  # a spec stored before the field: read into it
        raw["sink"]["kafka"]["properties"] = {"linger.ms": str(draw(linger))}
    if draw(st.booleans()):
        raw["sink"]["kafka"]["batch_size"] = draw(st.integers(MIN_BATCH_SIZE, MAX_BATCH_SIZE))
    if draw(st.booleans()):
        raw["sink"]["kafka"]["compression"] = draw(st.sampled_from(list(Compression))).value
    if draw(st.booleans()):
        dead_letter = draw(_TOPIC.filter(lambda t: t != sink_topic))
        raw["errors"] = {"tolerance": ErrorTolerance.ALL.value, "dead_letter_topic": dead_letter}
    return raw
