"""A single-node KRaft Kafka broker (combined broker + controller) run from deploy/kafka/libs.

The jars come from Maven Central through ``deploy/kafka/pom.xml`` (``make install``); the
broker runs as ``java -cp 'deploy/kafka/libs/*' kafka.Kafka server.properties`` with its
storage under ``<home>/kafka/data`` (formatted on first start) and its own log4j2 log under
``<home>/kafka/logs``. The settings are the ones a one-node cluster needs: internal topics
with replication factor 1, min ISR 1, no initial rebalance delay. ``transaction.max.timeout.ms``
stays at Kafka's default (15 minutes) so tests see the same limits production does, unless a
test's broker overrides it (``KafkaBrokerConfig.overrides``).
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate.localcluster.process import ProcessSpec, lockgate_home, repo_root, wait_until

#: Main class of ``kafka-storage.sh``.
STORAGE_TOOL = "kafka.tools.StorageTool"
#: Main class of ``kafka-transactions.sh``.
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"

_LOG4J2_PROPERTIES = """\
# Written by lockgate.localcluster.kafka: the broker logs to a file, at INFO, and keeps the
# noisy request/state-change loggers at WARN.
status = warn
appender.server.type = File
appender.server.name = server
appender.server.fileName = ${sys:kafka.logs.dir}/server.log
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.logcleaner.name = kafka.log.LogCleaner
logger.logcleaner.level = WARN
"""

_TOOLS_LOG4J2_PROPERTIES = """\
# Kafka command-line tools: warnings and errors only, on stderr.
status = warn
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
"""


#: The Python logger librdkafka's own log lines go to (``%6|...|BGQUEUE|...`` otherwise lands
#: on stderr, in the middle of a command's output); with no handler configured, Python prints
#: only its warnings and errors.
LIBRDKAFKA_LOGGER = "lockgate.localcluster.librdkafka"


def client_config(
    bootstrap_servers: str, settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Settings of a confluent-kafka client (Producer, Consumer, AdminClient) of the local
    tooling: `bootstrap_servers`, librdkafka's log routed to :data:`LIBRDKAFKA_LOGGER`, then
    `settings` (librdkafka's names)."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "logger": logging.getLogger(LIBRDKAFKA_LOGGER),
        **(settings or {}),
    }


class KafkaSetupError(RuntimeError):
    """Java or the Kafka jars are missing, or storage could not be formatted."""


@dataclass(frozen=True)
class KafkaBrokerConfig:
    """Where a local broker keeps its files and which ports it listens on."""

    home: Path
    host: str = "127.0.0.1"
    port: int = 9092
    controller_port: int = 9093
    heap: str = "512m"
    node_id: int = 1
    overrides: tuple[tuple[str, str], ...] = ()
    """Extra ``server.properties`` settings, last wins (tests: e.g. a short
    ``transaction.max.timeout.ms``)."""
    format_args: tuple[str, ...] = ()
    """Extra ``kafka-storage format`` arguments (tests: ``--add-scram`` credentials)."""

    @property
    def kafka_dir(self) -> Path:
        """Everything the broker owns: config, data, logs."""
        return self.home / "kafka"

    @property
    def data_dir(self) -> Path:
        """The broker's ``log.dirs`` (topic data and the KRaft metadata log)."""
        return self.kafka_dir / "data"

    @property
    def logs_dir(self) -> Path:
        """The broker's own log4j2 log files."""
        return self.kafka_dir / "logs"

    @property
    def server_properties(self) -> Path:
        """The generated ``server.properties``."""
        return self.kafka_dir / "server.properties"

    @property
    def log4j2_properties(self) -> Path:
        """The generated log4j2 configuration."""
        return self.kafka_dir / "log4j2.properties"

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"


def kafka_libs_dir() -> Path:
    """``deploy/kafka/libs``; raises :class:`KafkaSetupError` if the jars are not there."""
    libs = repo_root() / "deploy" / "kafka" / "libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise KafkaSetupError(
            f"the Kafka jars are missing from {libs}; run `make install` "
            "(or `mvn -q -B dependency:copy-dependencies` in deploy/kafka)"
        )
    return libs


def java_executable() -> str:
    """The ``java`` to run Kafka with; raises :class:`KafkaSetupError` if there is none."""
    java = shutil.which("java")
    if java is None:
        raise KafkaSetupError(
            "`java` was not found on PATH; install Java 17+ (e.g. `apt-get install openjdk-17-jre`)"
        )
    return java


def java_argv(
    main_class: str, *args: str, heap: str = "256m", log4j2: Path | None = None
) -> list[str]:
    """The command line running ``main_class`` on Kafka's classpath."""
    argv = [java_executable(), f"-Xmx{heap}"]
    if log4j2 is not None:
        argv.append(f"-Dlog4j2.configurationFile={log4j2}")
    # The trailing '*' is expanded by the JVM itself, not by a shell.
    argv += ["-cp", f"{kafka_libs_dir()}/*", main_class, *args]
    return argv


def server_properties(config: KafkaBrokerConfig) -> str:
    """The broker's ``server.properties`` text."""
    listener = f"PLAINTEXT://{config.host}:{config.port}"
    controller = f"CONTROLLER://{config.host}:{config.controller_port}"
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(config.node_id),
        # A static voter set: the ports live in this file only, so re-running `up` with other
        # ports on an already formatted home still works (a --standalone dynamic quorum would
        # have written the controller endpoint into the metadata log at format time).
        "controller.quorum.voters": f"{config.node_id}@{config.host}:{config.controller_port}",
        "listeners": f"{listener},{controller}",
        "advertised.listeners": listener,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(config.data_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "min.insync.replicas": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        **dict(config.overrides),
    }
    lines = ["# Written by lockgate.localcluster.kafka; regenerated on every start."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def write_broker_files(config: KafkaBrokerConfig) -> None:
    """Write ``server.properties`` and the log4j2 configuration under ``config.kafka_dir``."""
    config.kafka_dir.mkdir(parents=True, exist_ok=True)
    config.logs_dir.mkdir(parents=True, exist_ok=True)
    config.server_properties.write_text(server_properties(config))
    config.log4j2_properties.write_text(_LOG4J2_PROPERTIES)


def is_formatted(config: KafkaBrokerConfig) -> bool:
    """True if the broker's storage has been formatted (``meta.properties`` exists)."""
    return (config.data_dir / "meta.properties").exists()


def new_cluster_id() -> str:
    """A random Kafka cluster id (16 random bytes, URL-safe base64, as ``random-uuid``)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # As Kafka's Uuid.randomUuid(): an id starting with "-" would be read as an option
        # by kafka-storage's argument parser (1 run in 64 failed to format).
        if not cluster_id.startswith("-"):
            return cluster_id


def format_storage(config: KafkaBrokerConfig, *, timeout_s: float = 120.0) -> bool:
    """Format the broker's storage unless already done; True if it formatted now."""
    write_broker_files(config)
    if is_formatted(config):
        return False
    cluster_id = new_cluster_id()
    argv = java_argv(
        STORAGE_TOOL,
        "format",
        "--cluster-id",
        cluster_id,
        "--config",
        str(config.server_properties),
        *config.format_args,
        log4j2=tools_log4j2(config.home),
    )
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0:
        raise KafkaSetupError(
            f"formatting Kafka storage in {config.data_dir} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return True


def tools_log4j2(home: Path) -> Path:
    """A log4j2 configuration for Kafka's command-line tools (warnings on stderr)."""
    path = home / "kafka" / "tools-log4j2.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != _TOOLS_LOG4J2_PROPERTIES:
        path.write_text(_TOOLS_LOG4J2_PROPERTIES)
    return path


def is_broker_ready(bootstrap_servers: str, *, timeout_s: float = 1.0) -> bool:
    """True if a metadata request to ``bootstrap_servers`` succeeds and lists a broker."""
    admin = AdminClient(
        client_config(
            bootstrap_servers,
            {
                "socket.connection.setup.timeout.ms": 1000,
                # "Connection refused" is the expected answer while the broker starts: keep
                # librdkafka from logging it every 50 ms.
                "log_level": 0,
            },
        )
    )
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:
        # Any failure (connection refused, timeout, broker not yet registered) means "not yet".
        return False
    return len(metadata.brokers) > 0


def broker_spec(config: KafkaBrokerConfig, *, ready_timeout_s: float = 90.0) -> ProcessSpec:
    """The declarative description of the broker process for :mod:`process`.

    Building the spec checks nothing (so ``cluster down``/``status`` work on a machine
    without Java); starting it checks Java and the jars first, then formats storage once.
    """
    argv = (
        shutil.which("java") or "java",
        f"-Xmx{config.heap}",
        f"-Xms{config.heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={config.logs_dir}",
        f"-Dlog4j2.configurationFile={config.log4j2_properties}",
        "-cp",
        f"{repo_root() / 'deploy' / 'kafka' / 'libs'}/*",
        "kafka.Kafka",
        str(config.server_properties),
    )
    return ProcessSpec(
        name="kafka",
        argv=argv,
        address=config.bootstrap_servers,
        ports=(config.port, config.controller_port),
        cwd=config.kafka_dir,
        ready=lambda: is_broker_ready(config.bootstrap_servers),
        ready_timeout_s=ready_timeout_s,
        prepare=lambda: _prepare(config),
    )


def _prepare(config: KafkaBrokerConfig) -> None:
    java_executable()  # raise a clear KafkaSetupError before anything else
    kafka_libs_dir()
    format_storage(config)


def run_kafka_tool(
    main_class: str, *args: str, home: Path | None = None, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's Java tools (e.g. :data:`TRANSACTIONS_COMMAND`) and capture its output.

    ``home`` (default: the cluster home) only holds the tools' log4j2 file. The result is
    returned whatever the exit code; callers check ``returncode``.
    """
    argv = java_argv(main_class, *args, log4j2=tools_log4j2(lockgate_home(home)))
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)


def create_topic(
    bootstrap_servers: str, name: str, *, partitions: int = 1, timeout_s: float = 30.0
) -> None:
    """Create topic ``name`` with replication factor 1 and wait until the broker's metadata
    shows it with a leader for every partition. The controller answers CreateTopics once the
    topic is in its metadata log; the broker serves it from its metadata cache a moment later,
    so a client asking in between would be told the topic does not exist."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    admin = AdminClient(client_config(bootstrap_servers))
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    futures[name].result(timeout=timeout_s)

    def served() -> bool:
        topic = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        return (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        )

    wait_until(served, timeout_s=timeout_s, description=f"topic {name!r} in the metadata")


#: Prefix of the marker records :func:`read_visible` writes; readers skip them.
SENTINEL_PREFIX = b"__lockgate_sentinel__:"


@dataclass(frozen=True)
class ConsumedRecord:
    """One record as a consumer saw it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _write_sentinels(
    bootstrap_servers: str, topic: str, *, timeout_s: float, settings: Mapping[str, Any]
) -> tuple[list[int], bytes]:
    """Write one fresh sentinel record to every partition of `topic`; the partitions and
    the sentinel's value."""
    admin = AdminClient(client_config(bootstrap_servers, settings))
    metadata = admin.list_topics(topic=topic, timeout=timeout_s)
    topic_metadata = metadata.topics.get(topic)
    if topic_metadata is None or topic_metadata.error is not None:
        raise ValueError(f"topic {topic!r} does not exist on {bootstrap_servers}")
    partitions = sorted(topic_metadata.partitions)
    sentinel = SENTINEL_PREFIX + uuid.uuid4().hex.encode()
    producer = Producer(client_config(bootstrap_servers, {**settings, "acks": "all"}))
    for partition in partitions:
        producer.produce(topic, value=sentinel, partition=partition)
    if producer.flush(timeout_s) != 0:
        raise TimeoutError(f"could not write sentinels to {topic!r} within {timeout_s:.1f}s")
    return partitions, sentinel


def read_visible(
    bootstrap_servers: str,
    topic: str,
    *,
    isolation_level: str = "read_committed",
    timeout_s: float = 30.0,
    settings: Mapping[str, Any] | None = None,
) -> list[ConsumedRecord]:
    """Everything a consumer with ``isolation_level`` sees in ``topic``, settled
    (``settings``: more librdkafka settings of its clients, e.g. a secured listener's).

    Right after EndTxn returns, the coordinator may still be writing the transaction markers,
    so "nothing visible yet" proves nothing. This writes a non-transactional sentinel record
    to every partition *after* the call and reads from the beginning until every sentinel
    has been seen: a ``read_committed`` consumer only gets a sentinel once every transaction
    before it is decided, so what was read by then is final. Sentinels are left out of the
    result (and out of later calls' results).
    """
    if isolation_level not in ("read_committed", "read_uncommitted"):
        raise ValueError(
            f"isolation_level must be 'read_committed' or 'read_uncommitted', "
            f"got {isolation_level!r}"
        )
    partitions, sentinel = _write_sentinels(
        bootstrap_servers, topic, timeout_s=timeout_s, settings=settings or {}
    )

    consumer = Consumer(
        client_config(
            bootstrap_servers,
            {
                **(settings or {}),
                "group.id": f"lockgate-reader-{uuid.uuid4().hex}",
                "isolation.level": isolation_level,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            },
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        records: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{isolation_level} reader of {topic!r} did not reach the sentinel of "
                    f"partitions {sorted(pending)} within {timeout_s:.1f}s "
                    "(an open transaction before it keeps it invisible)"
                )
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                raise RuntimeError(f"reading {topic!r} failed: {error}")
            value = message.value()
            if isinstance(value, str):
                value = value.encode()
            if value == sentinel:
                pending.discard(message.partition())
                continue
            if value is not None and value.startswith(SENTINEL_PREFIX):
                continue
            key = message.key()
            records.append(
                ConsumedRecord(
                    partition=message.partition() or 0,
                    offset=message.offset() or 0,
                    key=key.encode() if isinstance(key, str) else key,
                    value=value,
                )
            )
        return records
    finally:
        consumer.close()
