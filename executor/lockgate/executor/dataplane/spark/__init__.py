"""The Spark data plane: one long-lived SparkSession, the Kafka source and 2PC sink.

* :mod:`.data_plane` -- :class:`SparkDataPlane`, what the runtime drives;
* :mod:`.batch` -- one checkpoint's pre-commit batch (read, transform, write prepared);
* :mod:`.kafka_source` / :mod:`.kafka_sink` -- the PySpark Python data sources;
* :mod:`.offsets` -- offset ranges and their snapshot; :mod:`.formats` -- record codecs;
* :mod:`.session` -- building and warming up the SparkSession.

Importing this package does not import PySpark (``--data-plane none`` never loads it).
"""

from lockgate.executor.dataplane.spark.data_plane import SparkDataPlane

__all__ = ["SparkDataPlane"]
