"""`spec_changes`: the fields that differ between two normalised pipeline specs."""

from __future__ import annotations

from typing import Any

from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.common.model.spec_changes import SpecChange, spec_changes

BASE: dict[str, Any] = {
    "name": "orders",
    "source": {"kafka": {"bootstrap_servers": "k:9092", "topics": ["in"]}},
    "sink": {"kafka": {"bootstrap_servers": "k:9092", "topic": "out"}},
}


def spec(**overrides: Any) -> PipelineSpec:
    return parse_pipeline_spec({**BASE, **overrides})


def test_a_default_written_out_is_no_change() -> None:
    assert spec_changes(spec(), spec(tasks_max=1, delivery="exactly_once")) == []


def test_each_changed_leaf_is_named_with_both_values() -> None:
    before = spec()
    after = spec(
        checkpoint={"interval_ms": 500},
        source={"kafka": {"bootstrap_servers": "k:9092", "topics": ["in", "more"]}},
    )
    assert spec_changes(before, after) == [
        SpecChange("checkpoint.interval_ms", 1000, 500),
        SpecChange("source.kafka.topics", ["in"], ["in", "more"]),
    ]


def test_a_field_only_one_side_has_is_none_on_the_other() -> None:
    changes = spec_changes(spec(), spec(transform={"sql": "SELECT * FROM input"}))
    assert changes == [SpecChange("transform.sql", None, "SELECT * FROM input")]
