"""The latency run's harness (``bench/latencygen`` driven by ``bench/eos/latency.py``) on a real
broker: it counts every record it produced, times what became visible, and reports what did
not as missing, so a latency figure of the bench cannot hide a lost record."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.kafka import KafkaBroker

# The bench's modules import each other as top-level names (``eos``, ``gobuild``): bench/ is
# their scripts' own directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from eos.latency import GENERATOR_PROCESS, READER_PROCESS, LatencySetup, run_latency


def _setup(broker: KafkaBroker, *, source: str, sink: str, settle_s: float) -> LatencySetup:
    return LatencySetup(
        bootstrap=broker.bootstrap_servers,
        source=source,
        sink=sink,
        partitions=2,
        value_bytes=60,
        rate=2_000,
        seconds=2,
        warmup_s=1,
        settle_s=settle_s,
    )


def test_every_record_produced_is_timed_once_and_the_warm_up_apart(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    # Read where it is written: nothing copies, so each record is visible once produced.
    topic = new_topic(partitions=2, prefix="latency")
    run = run_latency(_setup(kafka_broker, source=topic, sink=topic, settle_s=60))

    assert (run.records, run.warmup_records, run.missing) == (4_000, 2_000, 0)
    assert 0 < run.p50_ms <= run.p99_ms <= run.max_ms
    assert not math.isnan(run.warmup_p99_ms)
    assert run.achieved_rate > 0
    assert {GENERATOR_PROCESS, READER_PROCESS} <= run.cores.keys()


def test_records_that_never_become_visible_are_reported_missing(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    # Nothing copies the source into the sink: every record produced is missing.
    source, sink = (new_topic(partitions=2, prefix=side) for side in ("in", "out"))
    run = run_latency(_setup(kafka_broker, source=source, sink=sink, settle_s=1))

    assert run.missing == run.records + run.warmup_records == 6_000
    assert math.isnan(run.p99_ms) and math.isnan(run.warmup_p99_ms)
