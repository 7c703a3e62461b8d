"""Two registry processes on one PostgreSQL database under concurrent registrations."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import sqlalchemy as sa

from tests.support.processes import RegistryProcess

pytestmark = [pytest.mark.postgres]

SCHEMAS = 500
WRITERS = 8
SUBJECTS = 20
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def schema_text(index: int) -> str:
    """The index-th distinct schema, written with varying whitespace (same schema, other text)."""
    document = {
        "type": "record",
        "name": f"S{index}",
        "fields": [{"name": f"f{index}", "type": "long"}],
    }
    return json.dumps(document, indent=index % 3 or None)


def test_two_processes_eight_writers_one_id_per_schema(
    postgres_url: str, registry_factory: Callable[..., RegistryProcess]
) -> None:
    # Both start at once: they race to run the migrations on the empty database.
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: registry_factory(postgres_url), range(2))
    with httpx.Client(base_url=first.url) as client:
        # Schemas of one subject are unrelated records: compatibility is not what is tested.
        assert client.put("/config", json={"compatibility": "NONE"}).status_code == 200

    seen: dict[int, set[int]] = defaultdict(set)
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        order = list(range(SCHEMAS))
        random.Random(number).shuffle(order)
        clients = [httpx.Client(base_url=p.url, timeout=60) for p in (first, second)]
        try:
            start.wait()
            for step, index in enumerate(order):
                client = clients[(number + step) % 2]
                response = client.post(
                    f"/subjects/shared-{index % SUBJECTS}/versions",
                    content=json.dumps({"schema": schema_text(index)}),
                    headers=CT,
                )
                with lock:
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text}")
                    else:
                        seen[index].add(response.json()["id"])
        finally:
            for client in clients:
                client.close()

    began = time.monotonic()
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    elapsed = time.monotonic() - began
    assert not any(thread.is_alive() for thread in threads), "writers did not finish in 300 s"
    assert failures == []

    # Every schema got exactly one id, from every writer and both processes.
    assert sorted(seen) == list(range(SCHEMAS))
    assert all(len(ids) == 1 for ids in seen.values()), {
        i: ids for i, ids in seen.items() if len(ids) > 1
    }
    ids = [next(iter(ids)) for ids in seen.values()]
    assert len(set(ids)) == SCHEMAS, "two schemas share an id"

    # Each subject holds each of its schemas as exactly one version.
    with httpx.Client(base_url=second.url) as client:
        for subject in range(SUBJECTS):
            versions = client.get(f"/subjects/shared-{subject}/versions").json()
            assert versions == list(range(1, SCHEMAS // SUBJECTS + 1))
            version_ids = [
                client.get(f"/subjects/shared-{subject}/versions/{v}").json()["id"]
                for v in versions
            ]
            assert len(set(version_ids)) == len(version_ids)
            assert set(version_ids) == {
                next(iter(seen[i])) for i in range(subject, SCHEMAS, SUBJECTS)
            }

    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text("SELECT count(*), count(DISTINCT fingerprint) FROM sr_schemas")
            ).one()
    finally:
        engine.dispose()
    assert tuple(rows) == (SCHEMAS, SCHEMAS)
    print(f"{WRITERS * SCHEMAS} registrations through 2 processes in {elapsed:.1f} s")
