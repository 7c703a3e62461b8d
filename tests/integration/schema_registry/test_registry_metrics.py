"""The registry's Prometheus endpoints: with several worker processes, worker i serves its
own counts on its own port, and the counts over every worker add up to the lookups made."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from lockgate.v1 import schema_registry_pb2 as pb
from lockgate.v1 import schema_registry_pb2_grpc as pb_grpc
from tests.support.metrics import scrape, series_value
from tests.support.processes import RegistryProcess, start_registry
from tests.support.waits import wait_for

SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
LOOKUPS = 20
_METRICS_LINE = re.compile(r"metrics at http://(\S+)/metrics")


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., RegistryProcess]]:
    """Start a registry with telemetry on (``--metrics-listen`` then serves) and these args."""
    started: list[RegistryProcess] = []

    def run(*args: str) -> RegistryProcess:
        registry = start_registry(
            f"sqlite:///{tmp_path / 'registry.db'}",
            *args,
            environ={"OTEL_SDK_DISABLED": "false"},
        )
        started.append(registry)
        return registry

    yield run
    for registry in started:
        registry.stop()


def _metrics_addresses(registry: RegistryProcess, workers: int) -> list[str]:
    return wait_for(
        f"{workers} workers announcing their metrics endpoint",
        lambda: (
            found
            if len(
                found := sorted(
                    {m.group(1) for m in _METRICS_LINE.finditer("".join(registry.output))}
                )
            )
            == workers
            else None
        ),
        timeout_s=30,
        explain=lambda: "".join(registry.output),
    )


def _total(addresses: list[str], series: str, **labels: str) -> float:
    return sum(series_value(scrape(a), series, **labels) or 0.0 for a in addresses)


def test_lookups_are_counted_by_api_and_cache_across_workers(
    start: Callable[..., RegistryProcess],
) -> None:
    registry = start("--processes", "2", "--metrics-listen", "127.0.0.1:0")
    addresses = _metrics_addresses(registry, workers=2)
    with grpc.insecure_channel(registry.grpc_address) as channel:
        registered = pb_grpc.SchemaRegistryServiceStub(channel).RegisterSchema(
            pb.RegisterSchemaRequest(subject="orders-value", schema=SCHEMA), timeout=10
        )
    for _ in range(LOOKUPS):
        # A channel per call: connections spread over the workers (SO_REUSEPORT).
        with grpc.insecure_channel(registry.grpc_address) as channel:
            pb_grpc.SchemaRegistryServiceStub(channel).GetSchema(
                pb.GetSchemaRequest(schema_id=registered.schema_id), timeout=10
            )
        url = f"{registry.url}/schemas/ids/{registered.schema_id}"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=10) as answer:
            assert answer.status == 200

    series = "lockgate_registry_lookups_total"
    assert _total(addresses, series, api="grpc") == LOOKUPS
    assert _total(addresses, series, api="rest") == LOOKUPS
    # A worker reads the database for the id at most once (its first lookup, whichever the
    # API); every other lookup is a hit of its cache.
    assert _total(addresses, series, cache="miss") <= 2
    assert _total(addresses, series, cache="hit") >= 2 * LOOKUPS - 2
    calls = _total(addresses, "rpc_server_duration_seconds_count", rpc_method="GetSchema")
    assert calls == LOOKUPS
    ok = _total(
        addresses,
        "rpc_server_duration_seconds_count",
        rpc_method="GetSchema",
        rpc_grpc_status_code="0",
    )
    assert ok == LOOKUPS


def test_an_unknown_schema_is_a_miss_and_a_not_found_status(
    start: Callable[..., RegistryProcess],
) -> None:
    registry = start("--processes", "1", "--metrics-listen", "127.0.0.1:0")
    (address,) = _metrics_addresses(registry, workers=1)
    with (
        grpc.insecure_channel(registry.grpc_address) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        pb_grpc.SchemaRegistryServiceStub(channel).GetSchema(
            pb.GetSchemaRequest(schema_id=4242), timeout=10
        )
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND
    text = scrape(address)
    assert series_value(text, "lockgate_registry_lookups_total", api="grpc", cache="miss") == 1
    not_found = str(grpc.StatusCode.NOT_FOUND.value[0])
    assert (
        series_value(
            text,
            "rpc_server_duration_seconds_count",
            rpc_method="GetSchema",
            rpc_grpc_status_code=not_found,
        )
        == 1
    )
