"""Shared pytest configuration: the test tiers, the no-socket rule of unit tests, and the
real-process fixtures (which live in tests/fixtures/).

A test's tier is its folder, and only its folder: ``tests/unit`` is ``unit`` (pure logic: no
process, no socket), ``tests/integration/e2e`` is ``e2e`` (the whole cluster as processes; the
slow tier, ``make test-e2e``, which ``make test`` leaves out and CI runs after it), the rest of
``tests/integration`` is ``integration`` (real Kafka, PostgreSQL, Spark or one service as a
process). ``make test`` (``unit or integration``), ``make test-unit``, ``make
test-integration`` and ``make test-e2e`` select them with ``-m``; a test that marks itself with
another tier than its folder's is an error, so a selection never runs a test twice or misses
one. Hypothesis runs without its per-example deadline (a timing check, which belongs to bench/).
"""

from __future__ import annotations

import os

# Before anything imports gRPC. The data-plane tests start Spark's JVM (fork, then exec) from a
# process whose gRPC threads run (the fixtures' and tests' clients); gRPC's fork handlers,
# meant for children that go on using gRPC, broke that child now and then: "Java gateway
# process exited before sending its port number" after an epoll EBADF, failing every test of
# the package. The executor switches them off for the same reason (`executor/__main__.py`).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.kafka_sasl",
    "tests.fixtures.postgres",
    "tests.fixtures.schema_registry",
    "tests.fixtures.spark",
]

# Property tests assert behaviour, not speed: hypothesis's 200 ms per-example deadline failed
# them on a loaded two-core machine while the code was right (timing is bench/'s job).
settings.register_profile("lockgate", deadline=None)
settings.load_profile("lockgate")

# The test clusters serve plaintext on loopback: clients started by the tests (the CLI, the
# demo) must not pick up a developer's $LOCKGATE_HOME/tls or ./.lockgate/tls. The secure
# tests give their CA and tokens explicitly, which this does not turn off.
os.environ["LOCKGATE_INSECURE"] = "1"
# pytest-xdist's workers set COLUMNS=80 and LINES=24, and a rich Console made at import
# (the CLI's) keeps a width it found in the environment then: a test giving the CLI a wider
# COLUMNS would see tables squeezed to 80 columns under xdist only. Without them, rich reads
# COLUMNS when it renders, as in a run without xdist.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

_TESTS = Path(__file__).resolve().parent
#: Folder -> tier, most specific first.
_TIERS: tuple[tuple[Path, str], ...] = (
    (_TESTS / "unit", "unit"),
    (_TESTS / "integration" / "e2e", "e2e"),
    (_TESTS / "integration", "integration"),
)
_TIER_NAMES = frozenset(tier for _, tier in _TIERS)


def _tier_of(path: Path) -> str | None:
    for folder, tier in _TIERS:
        if path.is_relative_to(folder):
            return tier
    return None


# The slowest tier first: under pytest-xdist a long e2e file started last would run alone
# while the other process idles. A stable sort keeps each file's tests together, in order.
_TIER_ORDER = {"e2e": 0, "integration": 1, "unit": 2}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with the tier of its folder (refusing a test marked with another
    tier), and run the slowest tier first."""
    _mark_tiers(items)
    items.sort(key=lambda item: _TIER_ORDER.get(_tier_of(Path(item.path).resolve()) or "", 3))


def _mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier_of(Path(item.path).resolve())
        if tier is None:
            continue
        others = {m.name for m in item.iter_markers() if m.name in _TIER_NAMES} - {tier}
        if others:
            raise pytest.UsageError(
                f"{item.nodeid} is marked {sorted(others)} but its folder makes it {tier!r}: "
                "a test's tier is its folder; move the test or drop the marker"
            )
        item.add_marker(tier)


@pytest.fixture(autouse=True)
def _unit_tests_open_no_socket(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In a unit test, connecting or binding a socket fails the test at once, naming the
    address: a test that needs the network belongs in tests/integration."""
    if request.node.get_closest_marker("unit") is not None:

        def refuse(sock: socket.socket, address: object, *_: object) -> NoReturn:
            pytest.fail(
                f"a unit test opened a socket to {address!r}; move it to tests/integration",
                pytrace=True,
            )

        for method in ("connect", "connect_ex", "bind"):
            monkeypatch.setattr(socket.socket, method, refuse)
    yield
