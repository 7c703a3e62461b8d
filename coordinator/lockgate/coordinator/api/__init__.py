"""The coordinator's gRPC api: `servicer.py` converts, validates and delegates to the
herder; `convert.py` holds the conversions of the coordinator's resources (the protocol's
vocabulary converts in `lockgate.common.model.proto`)."""

from lockgate.coordinator.api.servicer import CoordinatorServicer

__all__ = ["CoordinatorServicer"]
