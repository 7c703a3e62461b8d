"""``SparkDataPlane``: the runtime's data plane backed by one long-lived SparkSession.

PySpark is imported inside the methods, so a process that runs ``--data-plane none``
never loads it.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from lockgate.common.errors import Unavailable
from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.pipeline_spec import DEFAULT_TRANSACTION_TIMEOUT_MS
from lockgate.executor.dataplane.protocol import PrecommitOutput, PrecommitWork
from lockgate.executor.dataplane.transform_modules import EXAMPLE_TRANSFORM_MODULES

DEFAULT_DRIVER_MEMORY = "512m"
"""The Spark driver JVM's heap (`spark.driver.memory`) unless `--spark-driver-memory` or
`--spark-conf` says otherwise; under `local[*]` the driver runs the tasks too, so this is the
heap of every batch. The JVM only passes Arrow batches between Spark's Python workers and
holds under 200 MB of live heap at `local[2]` (README, issue 13); a transform that
aggregates or joins a large batch may need more. Spark refuses a heap of under 450 MiB
usable (`INVALID_DRIVER_MEMORY`): this is about its floor."""

DEFAULT_DRIVER_JAVA_OPTIONS = "-Dlog4j2.level=WARN -XX:+UseSerialGC"
"""The Spark driver JVM's options (`spark.driver.extraJavaOptions`) unless `--spark-conf`
sets that key (which replaces them all). The serial collector: no GC threads or G1 region
tables to pay for on a heap this small (README, issue 13)."""

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG = logging.getLogger(__name__)


class SparkDataPlane:
    """The real data plane: one long-lived SparkSession, the Kafka source and 2PC sink.

    ``start`` builds the session and runs the warm-up job, so the first checkpoint does
    not pay for the JVM, the Python workers and their imports.
    """

    def __init__(
        self,
        *,
        master: str,
        conf: Mapping[str, str] | None = None,
        allowed_transform_modules: Sequence[str] = (),
    ) -> None:
        """``allowed_transform_modules``: module prefixes `transform.python` may come from,
        besides the project's examples (``--allow-transform-module``)."""
        self._master = master
        self._conf = dict(conf or {})
        self._allowed_transform_modules = tuple(allowed_transform_modules)
        self._spark: SparkSession | None = None

    def start(self) -> None:
        """Build the SparkSession and warm it up."""
        from lockgate.executor.dataplane.spark.session import build_spark_session

        started = time.monotonic()
        self._spark = build_spark_session(master=self._master, conf=self._conf)
        _LOG.info(
            "SparkSession on %s ready (with warm-up) in %.1fs",
            self._master,
            time.monotonic() - started,
        )

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        """Snapshot the end offsets, run the batch, leave its transactions open.

        Runs on the task's thread; the batch makes the session active on it.
        """
        from lockgate.executor.dataplane.spark.batch import BatchOptions, run_precommit_batch
        from lockgate.executor.dataplane.spark.offsets import snapshot_offset_ranges
        from lockgate.executor.dataplane.spark.session import task_slots

        if self._spark is None:
            raise Unavailable("the executor's SparkSession is not started yet; retry")
        spec = work.spec
        wanted = set(work.source_partitions)
        ranges = [
            r
            for r in snapshot_offset_ranges(
                bootstrap_servers=spec.source.bootstrap_servers,
                topics=sorted({topic for topic, _ in wanted}),
                start_offsets=work.start_offsets,
                starting_offsets=spec.source.starting_offsets,
                max_offsets_per_partition=work.max_records_per_partition or None,
                properties=dict(spec.source.properties),
            )
            if (r.topic, r.partition) in wanted
        ]
        result = run_precommit_batch(
            self._spark,
            spec,
            pipeline=PipelineId(work.task.pipeline_name),
            task=TaskId(str(work.task)),
            checkpoint_id=CheckpointId(work.checkpoint_id),
            offset_ranges=ranges,
            transactional_id_prefix=work.transactional_id_prefix,
            options=BatchOptions(
                max_packed_partitions=task_slots(self._spark),
                transaction_timeout_ms=work.transaction_timeout_ms
                or DEFAULT_TRANSACTION_TIMEOUT_MS,
                allowed_transform_modules=(
                    *EXAMPLE_TRANSFORM_MODULES,
                    *self._allowed_transform_modules,
                ),
            ),
        )
        return PrecommitOutput(
            ranges=result.consumed_ranges,
            handles=tuple(h.on(spec.sink.bootstrap_servers) for h in result.handles),
            records_read=result.records_in,
            records_written=result.records_out,
            records_dead_lettered=result.dead_lettered,
            bytes_read=result.bytes_in,
            bytes_written=result.bytes_out,
            oldest_record_timestamp_ms=result.oldest_timestamp_ms,
            spark_job_ids=result.spark_job_ids,
        )

    def cancel_running(self) -> None:
        """Cancel every running Spark job (each batch's job group among them).

        A batch blocked in a py4j call (a job that never ends) then fails with the
        cancellation, and Spark aborts its writers' transactions.
        """
        spark = self._spark
        if spark is None:
            return
        try:
            spark.sparkContext.cancelAllJobs()
        except Exception:
            _LOG.warning("cancelling the running Spark jobs failed", exc_info=True)

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Close the Kafka metadata clients, stop the SparkSession, then end its JVM (and with
        it Spark's Python workers).

        The JVM exits when its stdin, a pipe from this process, closes; one still there
        after ``timeout_s`` is killed, so no JVM outlives a stopped executor.
        """
        from lockgate.executor.dataplane.spark.offsets import METADATA_CLIENTS

        METADATA_CLIENTS.close_all()
        spark, self._spark = self._spark, None
        if spark is None:
            return
        jvm_process: subprocess.Popen[bytes] | None = getattr(
            spark.sparkContext._gateway, "proc", None
        )
        spark.stop()
        if jvm_process is None:
            return
        if jvm_process.stdin is not None:
            jvm_process.stdin.close()
        try:
            jvm_process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _LOG.warning("the Spark JVM (pid %d) did not exit: killing it", jvm_process.pid)
            jvm_process.kill()
            jvm_process.wait(timeout=5)


__all__ = ["SparkDataPlane"]
