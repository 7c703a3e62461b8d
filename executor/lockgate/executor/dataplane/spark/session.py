"""The executor's one long-lived SparkSession.

Built once at executor start for any master URL (``local[*]``, ``spark://…``, ``k8s://…``),
with the Lockgate data sources registered and a warm-up job run, so the first chained
checkpoint does not pay for JVM start, Python worker start and imports (``warm_up``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from lockgate.common.failpoints import FAILPOINT_HOLD_DIR_ENV, FAILPOINTS_ENV
from lockgate.executor.dataplane.spark.code_shipping import ship_lockgate
from lockgate.executor.dataplane.spark.data_plane import (
    DEFAULT_DRIVER_JAVA_OPTIONS,
    DEFAULT_DRIVER_MEMORY,
)
from lockgate.executor.dataplane.spark.kafka_sink import KafkaSink
from lockgate.executor.dataplane.spark.kafka_source import KafkaSource

_LOG = logging.getLogger(__name__)

_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    # Before the JVM starts (PySpark passes it to spark-submit): the heap is fixed then.
    "spark.driver.memory": DEFAULT_DRIVER_MEMORY,
    # Batches are small and mostly narrow: many shuffle partitions only cost scheduling.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Keep Python workers (and their imports) alive between tasks.
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.pythonUDF.arrow.enabled": "true",
    # A speculative copy of a write task would fence the attempt whose commit message
    # Spark keeps (same transactional.id): speculation must stay off.
    "spark.speculation": "false",
    "spark.sql.session.timeZone": "UTC",
    # Before the JVM starts too: the collector and the log level.
    "spark.driver.extraJavaOptions": DEFAULT_DRIVER_JAVA_OPTIONS,
    "spark.log.level": "WARN",
}


def register_data_sources(spark: SparkSession) -> None:
    """Register ``lockgate_kafka`` (source) and ``lockgate_kafka_sink`` with ``spark``.

    Registrations live in the SparkContext's shared state, so sessions made with
    ``newSession()`` see them too; registering twice is harmless.
    """
    for source in (KafkaSource, KafkaSink):
        try:
            spark.dataSource.register(source)
        except AnalysisException as exc:
            if exc.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
                raise


def _load_chained_task(_: Iterable[int]) -> Iterator[int]:
    # What a chained task (chained.py) imports when it starts reading and producing.
    import lockgate.executor.dataplane.spark.kafka_sink_write
    import lockgate.executor.dataplane.spark.kafka_source_read  # noqa: F401

    yield 1


def warm_up(spark: SparkSession) -> float:
    """Start one Python worker per core with a chained task's imports; returns seconds.

    Only the chained path (``chained.py``: a copy, or a transform that only selects
    columns) is warmed, the one most pipelines take. The data sources' path is not: its
    first batch starts Spark's Python planner workers (one daemon and worker per kind:
    create, plan the read, plan the write, commit) and its SQL task workers, seconds once
    per executor, which a warm-up would keep resident (about 0.9-1.0 GB at ``local[2]``, README
    issue 13) on every executor, whatever pipelines it runs.
    """
    started = time.monotonic()
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    spark.sparkContext.parallelize(range(parallelism), parallelism).mapPartitions(
        _load_chained_task
    ).count()
    return time.monotonic() - started


def task_slots(spark: SparkSession) -> int:
    """How many tasks the session's executors run at once now: ``local[2]``'s 2, or the
    cores of a cluster's executors registered now (not `spark.default.parallelism`, a
    setting: 4 here). Asked of the JVM each time; 0 when it cannot say (no cap)."""
    context = spark.sparkContext._jsc.sc()
    try:
        profile = context.resourceProfileManager().defaultResourceProfile()
        return max(0, int(context.maxNumConcurrentTasks(profile)))
    except Py4JError:
        _LOG.warning("Spark did not say how many tasks it runs at once", exc_info=True)
        return 0


def session_settings(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every Spark setting the executor's session is built with: Lockgate's defaults (the
    JVM's heap and options among them), then ``conf`` (``--spark-conf``,
    ``--spark-driver-memory``), then what no ``conf`` may undo."""
    return {
        **_DEFAULT_CONF,
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        # A write partition reads its failpoints (tests) where it runs: on a cluster, in a
        # Python worker of another machine, which sees the executor's environment only so.
        **{
            f"spark.executorEnv.{name}": os.environ[name]
            for name in (FAILPOINTS_ENV, FAILPOINT_HOLD_DIR_ENV)
            if name in os.environ
        },
        **(conf or {}),
        # Last, so no --spark-conf undoes it: a SQL transform must not read the executor's
        # files as tables (`parquet.`/path``).
        "spark.sql.runSQLOnFiles": "false",
    }


def build_spark_session(
    *,
    master: str,
    app_name: str = "lockgate-executor",
    conf: Mapping[str, str] | None = None,
    run_warm_up: bool = True,
) -> SparkSession:
    """Create (or get) the executor's SparkSession with Lockgate's settings.

    ``conf`` overrides the defaults (e.g. ``spark.executor.memory`` for a cluster). The
    Lockgate packages the workers import are shipped to them (``code_shipping.py``). Spark's
    Python workers run the interpreter running this code unless ``spark.pyspark.python``
    (or the ``PYSPARK_PYTHON`` environment variable) names another one.
    """
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = session_settings(conf)
    # PySpark's SparkContext takes the workers' interpreter from PYSPARK_PYTHON, not from
    # the conf (the conf only matters to spark-submit): without it the workers run the
    # first python3 on PATH, which cannot import lockgate.
    os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # Before the registration: the data sources' Python functions carry the includes of
    # the moment they are made, and a cluster's workers import Lockgate only from them.
    ship_lockgate(spark.sparkContext)
    register_data_sources(spark)
    if run_warm_up:
        warm_up(spark)
    return spark
