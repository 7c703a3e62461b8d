"""``make demo`` prints only its own lines: librdkafka's log lines (``%6|...|BGQUEUE|...``)
do not leak into its output."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from tests.fixtures.kafka import KafkaBroker

#: The start of a line librdkafka prints itself: ``%<syslog level>|<time>|<facility>|``.
_LIBRDKAFKA_LINE = re.compile(r"^%\d\|", re.MULTILINE)

_SEED_AND_CHECK = textwrap.dedent(
    """
    import sys, time
    from lockgate.localcluster.demo import check, create_topic, seed_input
    bootstrap, source, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
    create_topic(bootstrap, source, partitions=2)
    seed_input(bootstrap, source, records=records, partitions=2)
    result = check(bootstrap, source, records=records, began=time.monotonic())
    print(f"records out {result.records_out} missing {result.missing}")
    """
)


def test_the_demo_seed_and_check_print_no_librdkafka_lines(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """The demo's seeding (topic creation, producer) and its read_committed check run in a
    process of their own, as in ``make demo``; its stdout and stderr hold no librdkafka line."""
    source = f"demo-quiet-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", _SEED_AND_CHECK, kafka_broker.bootstrap_servers, source, "500"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "records out 500 missing 0" in done.stdout, output
    assert not _LIBRDKAFKA_LINE.search(output), output
