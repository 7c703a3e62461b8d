"""``lockgate.registry.lookups``: schema lookups by global id, by API and cache outcome.

The gRPC and REST edges count each lookup by id here: ``hit`` when memory answered it
(an edge's response cache or the registry's schema cache), ``miss`` when it read the
database. A lookup of an unknown id is a miss too: it asked the database.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from lockgate.common.metrics import REGISTRY_LOOKUPS, Instruments


class LookupApi(enum.StrEnum):
    """Which API a lookup came through."""

    GRPC = "grpc"
    REST = "rest"


class LookupCounter:
    """Counts lookups by id; thread-safe. Without instruments (metrics off) it does
    nothing at all: a lookup answered from memory costs tens of microseconds, and even
    a no-op OpenTelemetry counter would add a few."""

    def __init__(self, instruments: Instruments | None = None) -> None:
        self._instruments = instruments
        # The four attribute sets, built once rather than per lookup.
        self._attributes: Mapping[tuple[LookupApi, bool], Mapping[str, str]] = {
            (api, hit): {"api": api.value, "cache": "hit" if hit else "miss"}
            for api in LookupApi
            for hit in (True, False)
        }

    def count(self, api: LookupApi, *, hit: bool) -> None:
        """One lookup through ``api``, answered from memory (``hit``) or the database."""
        if self._instruments is not None:
            self._instruments.add(REGISTRY_LOOKUPS, 1, self._attributes[api, hit])


__all__ = ["LookupApi", "LookupCounter"]
