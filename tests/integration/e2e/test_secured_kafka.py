"""A copy pipeline through a SASL_SSL listener (SCRAM-SHA-512 over TLS), exactly once, with
its password given as a ``${file:...}`` reference, and the password nowhere to be seen.

One coordinator and one executor (real processes) against the ``sasl_ssl_broker`` fixture.
The executor holds after its first pre-commit (``after_precommit_before_report:hold``), so
the leader times that checkpoint out and aborts it; released, the executor aborts its own
open transactions by EndTxn (the resume path over SASL_SSL) and the leader's retried abort
lists the slot's open transactions (ListTransactions over SASL_SSL) and fences them. Then
the later checkpoints commit (EndTxn over SASL_SSL), and a read_committed consumer on the
SASL_SSL listener must see every input record exactly once: a transaction left open would
hold back everything after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format

from lockgate.localcluster.kafka import create_topic, read_visible
from lockgate.v1 import coordinator_pb2
from tests.fixtures.kafka_sasl import SaslSslBroker
from tests.integration.e2e.harness import (
    ServiceCluster,
    check_output,
    held,
    pipeline_yaml,
    produce_keyed,
    release,
    unique,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

HOLD = "after_precommit_before_report"
RECORDS = 400


@pytest.fixture(scope="module")
def secured(
    sasl_ssl_broker: SaslSslBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceCluster, Path]]:
    """c1 and e1; e1 holds at its first pre-commit until the test releases it."""
    home = tmp_path_factory.mktemp("e2e-sasl")
    hold_dir = home / "hold"
    hold_dir.mkdir()
    services = ServiceCluster(
        home=home,
        bootstrap_servers=sasl_ssl_broker.sasl_servers,
        coordinator_args=("--heartbeat-interval-ms", "500"),
    )
    try:
        services.start_coordinator("c1")
        services.start_executor("e1", failpoints=f"{HOLD}:hold", hold_dir=hold_dir)
        yield services, hold_dir
    finally:
        services.stop_all()


def test_copy_through_sasl_ssl_runs_exactly_once_and_never_shows_the_password(
    sasl_ssl_broker: SaslSslBroker, secured: tuple[ServiceCluster, Path], tmp_path: Path
) -> None:
    cluster, hold_dir = secured
    broker, password = sasl_ssl_broker, sasl_ssl_broker.password
    source, sink, name = unique("in"), unique("out"), unique("sasl")
    for topic in (source, sink):
        create_topic(broker.plaintext_servers, topic, partitions=2)
    expected = produce_keyed(broker.plaintext_servers, source, records=RECORDS, partitions=2)
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(
        pipeline_yaml(
            name=name,
            bootstrap_servers=broker.sasl_servers,
            source_topic=source,
            sink_topic=sink,
            timeout_ms=12_000,
            tasks_max=1,
            extra_source={"properties": broker.pipeline_properties()},
            extra_sink={"properties": broker.pipeline_properties()},
        )
    )
    cluster.cli("pipeline", "create", "-f", str(spec))

    # Checkpoint 1 is written (transactions open) and held unreported: it times out.
    wait_for("the first pre-commit to hold", lambda: held(hold_dir, HOLD), timeout_s=120)
    wait_for(
        "the held checkpoint to be aborted",
        lambda: cluster.pipeline_status(name).HasField("last_aborted_checkpoint"),
        timeout_s=60,
    )
    release(hold_dir, HOLD)

    wait_for(
        "every record to be read by a COMPLETE checkpoint",
        lambda: sum(cluster.offsets(name).values()) >= RECORDS,
        timeout_s=120,
        explain=cluster.logs_tail,
    )
    output = read_visible(
        broker.sasl_servers, sink, settings=broker.client_settings(), timeout_s=60
    )
    result = check_output(expected, output)
    assert (result.duplicates, result.missing) == (0, 0), f"{result}\n{cluster.logs_tail()}"
    executor_log = cluster.log("executor-e1")
    assert "abort of its own handles failed" not in executor_log, cluster.logs_tail()

    # The reference is what is stored and shown; the password itself appears nowhere.
    got = cluster.call(
        lambda s: s.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=10)
    )
    shown = {
        "GetPipeline": text_format.MessageToString(got),
        "pipeline get": cluster.cli("pipeline", "get", name).stdout,
        "pipeline get -o json": cluster.cli("pipeline", "get", name, "-o", "json").stdout,
        "pipeline status": cluster.cli("pipeline", "status", name).stdout,
        "pipeline status -o json": cluster.cli("pipeline", "status", name, "-o", "json").stdout,
    }
    assert f"${{file:{broker.secrets_file}:password}}" in shown["pipeline get -o json"]
    for where, text in shown.items():
        assert password not in text, f"{where} shows the password"
    for process in sorted(cluster.names):
        assert password not in cluster.log(process), f"the log of {process} holds the password"
    stored = (cluster.home / "coordinator.db").read_bytes()
    assert password.encode() not in stored, "the coordinator's database holds the password"
