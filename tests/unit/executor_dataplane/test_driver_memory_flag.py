"""The executor's `--spark-driver-memory` flag: the Spark driver JVM's heap."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lockgate.executor.__main__ import _spark_conf, main
from lockgate.executor.dataplane.spark.session import _DEFAULT_CONF


def test_the_flag_sets_the_driver_heap_and_the_session_has_a_default() -> None:
    assert _spark_conf([], "768m") == {"spark.driver.memory": "768m"}
    assert _spark_conf(["spark.executor.memory=2g"], None) == {"spark.executor.memory": "2g"}
    assert _DEFAULT_CONF["spark.driver.memory"]  # set before the JVM starts, never Spark's own


def test_the_data_sources_plan_without_pyarrow_or_librdkafka() -> None:
    # Spark's planner and commit workers import these modules to unpickle the data
    # sources: about 60 MB more in each of them if either loads pyarrow or confluent-kafka.
    probe = (
        "import sys\n"
        "import lockgate.executor.dataplane.spark.kafka_sink\n"
        "import lockgate.executor.dataplane.spark.kafka_source\n"
        "print(sorted({'pyarrow', 'confluent_kafka', 'kafka'} & set(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--spark-driver-memory", "lots"], "--spark-driver-memory 'lots': write a JVM size"),
        (["--spark-driver-memory", "0m"], "--spark-driver-memory '0m': write a JVM size"),
        (
            ["--spark-driver-memory", "1g", "--spark-conf", "spark.driver.memory=2g"],
            "both set the driver's heap: keep one",
        ),
    ],
)
def test_a_bad_or_doubled_heap_is_refused_at_start(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--id", "e1", "--coordinator", "127.0.0.1:1", *flags])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
