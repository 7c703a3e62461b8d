"""The coordinator's gRPC api: `servicer.py` converts, validates and delegates to the
herder; `spec_convert.py` and `convert.py` hold the proto <-> domain conversions;
`fencing.py` the leader-only guard and the stale-token answer."""

from lockgate.coordinator.api.servicer import CoordinatorServicer

__all__ = ["CoordinatorServicer"]
