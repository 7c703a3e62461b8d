"""Free-port reservations: a port handed out is not handed out again while reserved, even when
the kernel offers it again (another xdist worker asking a moment later)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.localcluster import ports


@pytest.fixture(autouse=True)
def reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ports, "RESERVATIONS", tmp_path / "reservations")
    return tmp_path / "reservations"


def offers(*found: int) -> Iterator[int]:
    yield from found


def test_a_reserved_port_is_skipped_for_the_next_free_one() -> None:
    kernel = offers(40001, 40001, 40002)
    assert ports.pick_port(lambda: next(kernel), now=lambda: 1000.0) == 40001
    assert ports.pick_port(lambda: next(kernel), now=lambda: 1001.0) == 40002


def test_a_reservation_expires() -> None:
    kernel = offers(40001, 40001)
    assert ports.pick_port(lambda: next(kernel), now=lambda: 1000.0) == 40001
    later = 1000.0 + ports.RESERVED_FOR_S + 1
    assert ports.pick_port(lambda: next(kernel), now=lambda: later) == 40001


def test_when_every_offer_is_reserved_the_last_is_handed_out() -> None:
    assert ports.pick_port(lambda: 40001, now=lambda: 1000.0) == 40001
    assert ports.pick_port(lambda: 40001, now=lambda: 1000.0) == 40001
