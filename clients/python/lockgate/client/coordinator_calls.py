"""Calls to the coordinator from the ``lockgate`` command line: the channel, the one way a
failed call is reported (its status, each field violation once, exit 2 for invalid input and
1 otherwise), and the ``--coordinator`` option.

Calls go to ``--coordinator`` (one or several comma-separated addresses, env
``LOCKGATE_COORDINATOR``) through a leader-following channel, so any replica will do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated, NoReturn, TypeVar

import grpc
import typer

from lockgate.client.output import error_text, fail
from lockgate.client.security_options import current_security
from lockgate.common.grpc_client import error_details, open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

DEFAULT_COORDINATOR = "127.0.0.1:7070"
COORDINATOR_ENV = "LOCKGATE_COORDINATOR"
#: Seconds a call may take.
TIMEOUT_S = 15.0
_T = TypeVar("_T")

CoordinatorOption = Annotated[
    str,
    typer.Option(
        "--coordinator",
        "-c",
        envvar=COORDINATOR_ENV,
        help=f"Coordinator address(es), comma-separated HOST:PORT (env {COORDINATOR_ENV}).",
    ),
]


@contextlib.contextmanager
def coordinator_stub(coordinator: str) -> Iterator[coordinator_pb2_grpc.CoordinatorServiceStub]:
    """A stub over a leader-following channel to `coordinator`; exit 2 if the address
    list is unusable."""
    try:
        channel = open_channel(
            [a for a in coordinator.split(",") if a.strip()], security=current_security()
        )
    except ValueError as exc:
        fail(f"--coordinator: {exc}", code=2)
    with channel:
        yield coordinator_pb2_grpc.CoordinatorServiceStub(channel)


def _refused(coordinator: str, err: grpc.RpcError) -> NoReturn:
    """Print a failed call's status and field violations, and exit (2: invalid input)."""
    details = error_details(err)
    if details.code == grpc.StatusCode.UNAVAILABLE and not details.reason:
        fail(
            f"cannot reach a coordinator at {coordinator} ({details.message}); start "
            f"one (`make cluster-up`) or pass --coordinator / {COORDINATOR_ENV}; a TLS "
            "server refuses plaintext: give `lockgate --tls-ca CA` (found in "
            "$LOCKGATE_HOME/tls by default) rather than --insecure"
        )
    violations = [(v.field, v.description) for v in details.field_violations]
    fail(
        error_text(details.code.name, details.message, violations),
        code=2 if details.code == grpc.StatusCode.INVALID_ARGUMENT else 1,
    )


def call(
    coordinator: str, invoke: Callable[[coordinator_pb2_grpc.CoordinatorServiceStub], _T]
) -> _T:
    """Run one call; a failed call prints its status and field violations and exits."""
    with coordinator_stub(coordinator) as stub:
        try:
            return invoke(stub)
        except grpc.RpcError as err:
            _refused(coordinator, err)


def existing_pipeline(coordinator: str, name: str) -> common_pb2.Pipeline | None:
    """The pipeline `name` as the coordinator has it, or None if there is none (any other
    failure exits as `call`'s do)."""
    request = coordinator_pb2.GetPipelineRequest(name=name)
    with coordinator_stub(coordinator) as stub:
        try:
            found: common_pb2.Pipeline = stub.GetPipeline(request, timeout=TIMEOUT_S).pipeline
            return found
        except grpc.RpcError as err:
            if error_details(err).code == grpc.StatusCode.NOT_FOUND:
                return None
            _refused(coordinator, err)


__all__ = [
    "COORDINATOR_ENV",
    "DEFAULT_COORDINATOR",
    "TIMEOUT_S",
    "CoordinatorOption",
    "call",
    "coordinator_stub",
    "existing_pipeline",
]
