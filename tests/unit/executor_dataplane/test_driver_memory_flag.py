"""The Spark driver JVM's memory: the `--spark-driver-memory` flag, the session's defaults,
and the planning halves of the data sources, which Spark's planner workers import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lockgate.executor.__main__ import _spark_conf, main
from lockgate.executor.dataplane.spark.session import session_settings


def test_the_flag_sets_the_driver_heap() -> None:
    assert _spark_conf([], "768m") == {"spark.driver.memory": "768m"}
    assert _spark_conf(["spark.executor.memory=2g"], None) == {"spark.executor.memory": "2g"}


def test_the_session_defaults_to_a_small_heap_and_the_serial_collector() -> None:
    settings = session_settings()
    assert settings["spark.driver.memory"] == "512m"
    assert settings["spark.driver.extraJavaOptions"].split() == [
        "-Dlog4j2.level=WARN",
        "-XX:+UseSerialGC",
    ]


def test_the_flag_and_the_spark_conf_reach_the_session_over_the_defaults() -> None:
    conf = _spark_conf(["spark.driver.extraJavaOptions=-XX:+UseG1GC"], "768m")
    settings = session_settings(conf)
    assert settings["spark.driver.memory"] == "768m"
    assert settings["spark.driver.extraJavaOptions"] == "-XX:+UseG1GC"


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
