"""``lockgate.registry.lookups``: schema lookups by global id, by API and cache outcome.

The gRPC and REST edges count each lookup by id here: ``hit`` when memory answered it
(an edge's response cache or the registry's schema cache), ``miss`` when it read the
database. A lookup of an unknown id is a miss too: it asked the database.
"""

from __future__ import annotations

import enum

from lockgate.common.metrics import REGISTRY_LOOKUPS, Instruments


class LookupApi(enum.StrEnum):
    """Which API a lookup came through."""

    GRPC = "grpc"
    REST = "rest"


class LookupCounter:
    """Counts lookups by id; thread-safe, a no-op with metrics off."""

    def __init__(self, instruments: Instruments | None = None) -> None:
        self._instruments = instruments or Instruments.disabled()

    def count(self, api: LookupApi, *, hit: bool) -> None:
        """One lookup through ``api``, answered from memory (``hit``) or the database."""
        self._instruments.add(
            REGISTRY_LOOKUPS, 1, {"api": api.value, "cache": "hit" if hit else "miss"}
        )


__all__ = ["LookupApi", "LookupCounter"]
