"""A tiny Lockgate-style gRPC server for tests/integration/test_grpc_plumbing.py.

Runs as a separate process: ``python grpc_plumbing_server.py --name leader``. It serves
``lockgate.test.v1.Echo`` (raw bytes, no protos) through ``build_server``, with telemetry
from the OTEL_* environment, prints ``LISTENING <host:port>`` once serving, and stops
gracefully on SIGTERM.

Methods: ``Echo`` answers ``{"server", "trace_id", "payload"}`` as JSON (a follower started
with ``--leader ADDRESS`` answers NotLeader instead); ``Fail`` raises the domain error named
by the request; ``Boom`` raises an unexpected exception holding a fake secret; ``Hold``
answers ``released`` once the file the request names exists (at most 60 s), so a test can
keep calls in flight.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from lockgate.common.errors import (
    FencingToken,
    FieldViolation,
    InvalidArgument,
    NotFound,
    NotLeader,
    StaleTokenError,
)
from lockgate.common.grpc_server import build_server
from lockgate.common.telemetry import current_trace_id, setup_telemetry

SERVICE = "lockgate.test.v1.Echo"
SECRET = "sasl.password=hunter2"


def main() -> int:
    """Serve until SIGTERM; exit 0 after a graceful stop."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--leader", default=None, help="act as a follower of this address")
    parser.add_argument("--max-workers", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    telemetry = setup_telemetry(f"plumbing-{args.name}", service_instance_id=args.name)

    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        if args.leader:
            raise NotLeader(leader_address=args.leader)
        with telemetry.span("echo.work"):
            body: dict[str, Any] = {
                "server": args.name,
                "trace_id": current_trace_id(),
                "payload": request.decode(),
            }
        return json.dumps(body).encode()

    def fail(request: bytes, context: grpc.ServicerContext) -> bytes:
        kind = request.decode()
        if kind == "invalid":
            raise InvalidArgument(
                "pipeline.sink.topic: must not be empty",
                violations=[FieldViolation("pipeline.sink.topic", "must not be empty")],
            )
        if kind == "not_found":
            raise NotFound(
                "pipeline 'orders' does not exist",
                resource_type="Pipeline",
                resource_name="orders",
            )
        if kind == "fenced":
            raise StaleTokenError(
                token=FencingToken.LEADER_EPOCH, subject="", presented=2, current=3
            )
        raise ValueError(f"unknown failure kind {kind!r}")

    def boom(request: bytes, context: grpc.ServicerContext) -> bytes:
        raise RuntimeError(f"could not reach the broker with {SECRET}")

    def hold(request: bytes, context: grpc.ServicerContext) -> bytes:
        release = Path(request.decode())
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        return b"released" if release.exists() else b"timed out"

    def heap(request: bytes, context: grpc.ServicerContext) -> bytes:
        # Objects out of the collector's reach, and objects its full passes walk.
        return f"{gc.get_freeze_count()} {len(gc.get_objects())}".encode()

    def register(server: grpc.Server) -> None:
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        "Echo": grpc.unary_unary_rpc_method_handler(echo),
                        "Fail": grpc.unary_unary_rpc_method_handler(fail),
                        "Boom": grpc.unary_unary_rpc_method_handler(boom),
                        "Hold": grpc.unary_unary_rpc_method_handler(hold),
                        "Heap": grpc.unary_unary_rpc_method_handler(heap),
                    },
                )
            ]
        )

    server = build_server(
        service_name=f"plumbing-{args.name}",
        listen=args.listen,
        register=register,
        service_full_names=[SERVICE],
        telemetry=telemetry,
        grace_seconds=5.0,
        max_workers=args.max_workers,
    )
    server.catch_signals()  # before announcing it: a SIGTERM right after stops it gracefully
    print(f"LISTENING {server.address}", flush=True)
    server.serve_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
