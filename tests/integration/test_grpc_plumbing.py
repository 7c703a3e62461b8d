"""build_server / open_channel / telemetry across real processes.

Each server is a separate Python process (tests/integration/grpc_plumbing_server.py) built
with ``build_server``; the test process is the client.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from lockgate.common.errors import StaleTokenError
from lockgate.common.grpc_client import (
    LeaderFollowingChannel,
    error_details,
    leader_address_of,
    open_channel,
)
from lockgate.common.grpc_server import (
    MAX_CONCURRENT_RPCS,
    MAX_RECEIVE_MESSAGE_BYTES,
    ServerBindError,
    build_server,
)
from lockgate.common.telemetry import CONSOLE_PATH_ENV, setup_telemetry
from lockgate.localcluster.ports import free_port
from tests.support.waits import wait_for

SERVER_SCRIPT = Path(__file__).with_name("grpc_plumbing_server.py")
SERVICE = "lockgate.test.v1.Echo"
START_TIMEOUT = 60.0


@dataclass
class ServerProcess:
    """A running plumbing server and the files it writes."""

    name: str
    process: subprocess.Popen[bytes]
    address: str
    spans_path: Path
    log_path: Path

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the exit code (SIGKILL if it does not stop in time)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                raise
        return self.process.returncode

    def spans(self) -> list[dict[str, Any]]:
        """Spans the server exported (complete once it has exited)."""
        if not self.spans_path.exists():
            return []
        return [json.loads(line) for line in self.spans_path.read_text().splitlines()]


def _read_listening_line(process: subprocess.Popen[bytes], log_path: Path) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffer = b""
    try:
        while time.monotonic() < deadline:
            if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    break
                buffer += chunk
                for line in buffer.decode(errors="replace").splitlines():
                    if line.startswith("LISTENING "):
                        return line.split(" ", 1)[1].strip()
    finally:
        selector.close()
    process.kill()
    process.wait(timeout=10)
    raise AssertionError(
        f"server did not report LISTENING within {START_TIMEOUT}s; stdout={buffer!r}\n"
        f"log:\n{log_path.read_text(errors='replace')[-3000:]}"
    )


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start plumbing servers as separate processes; all are stopped after the test."""
    started: list[ServerProcess] = []

    def start(
        name: str, *, leader: str | None = None, tracing: bool = True, max_workers: int = 16
    ) -> ServerProcess:
        spans_path = tmp_path / f"{name}-spans.jsonl"
        log_path = tmp_path / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOCKGATE_TELE"))}
        if tracing:
            env |= {"OTEL_TRACES_EXPORTER": "console", CONSOLE_PATH_ENV: str(spans_path)}
        args = [sys.executable, str(SERVER_SCRIPT), "--name", name]
        args += ["--max-workers", str(max_workers)]
        if leader:
            args += ["--leader", leader]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=log, env=env, stdin=subprocess.DEVNULL
            )
        address = _read_listening_line(process, log_path)
        server = ServerProcess(name, process, address, spans_path, log_path)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=10)
        if server.process.stdout is not None:
            server.process.stdout.close()


def _echo(channel: grpc.Channel, payload: str, timeout: float = 10.0) -> dict[str, Any]:
    call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Echo")
    response: bytes = call(payload.encode(), timeout=timeout)
    body: dict[str, Any] = json.loads(response)
    return body


def test_trace_context_propagates_across_processes(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = start_server("leader")
    client_spans_path = tmp_path / "client-spans.jsonl"
    telemetry = setup_telemetry(
        "plumbing-client",
        environ={"OTEL_TRACES_EXPORTER": "console", CONSOLE_PATH_ENV: str(client_spans_path)},
        set_global=False,
    )
    with open_channel(server.address, telemetry=telemetry) as channel:
        with telemetry.span("client.checkpoint") as root:
            reply = _echo(channel, "hello")
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    telemetry.shutdown()
    assert server.terminate() == 0  # graceful stop on SIGTERM, telemetry flushed

    trace_id = format(root.get_span_context().trace_id, "032x")
    assert reply["server"] == "leader"
    assert reply["trace_id"] == trace_id  # the server handled the call inside our trace

    client_spans = [json.loads(line) for line in client_spans_path.read_text().splitlines()]
    (client_rpc,) = [s for s in client_spans if s["name"] == f"/{SERVICE}/Echo"]
    assert client_rpc["kind"] == "SpanKind.CLIENT"
    server_spans = server.spans()
    (server_rpc,) = [s for s in server_spans if s["name"] == f"/{SERVICE}/Echo"]
    assert server_rpc["kind"] == "SpanKind.SERVER"
    assert server_rpc["context"]["trace_id"] == client_rpc["context"]["trace_id"] == "0x" + trace_id
    assert server_rpc["parent_id"] == client_rpc["context"]["span_id"]
    (work,) = [s for s in server_spans if s["name"] == "echo.work"]
    assert work["parent_id"] == server_rpc["context"]["span_id"]
    assert server_rpc["resource"]["attributes"]["service.name"] == "plumbing-leader"
    # Health probes are not traced: they would drown the real calls.
    assert not [s for s in server_spans if "Health" in s["name"]]


def test_health_reports_serving(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server("leader", tracing=False)
    with open_channel(server.address, follow_leader=False) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_serving_process_has_frozen_its_start_up_heap_out_of_the_collectors_passes(
    start_server: Callable[..., ServerProcess],
) -> None:
    """A full collection walks every object the collector tracks with the GIL held: in a
    coordinator or executor that paused every thread for 50-120 ms. Once serving, what the
    start-up built is frozen, so a full pass walks only what was made since."""
    server = start_server("leader", tracing=False)
    with open_channel(server.address, follow_leader=False) as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Heap")

        def heap() -> tuple[int, int] | None:
            frozen, tracked = map(int, call(b"", timeout=10).split())
            return (frozen, tracked) if frozen else None

        frozen, tracked = wait_for("the serving process to freeze its heap", heap, timeout_s=10)
    # Imports, the server and its plumbing: tens of thousands of objects, against the few
    # that serving a call has made since.
    assert frozen > 10_000
    assert tracked < frozen / 4, f"{tracked} objects still walked, {frozen} frozen"


def test_reflection_lists_services(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server("leader", tracing=False)
    with open_channel(server.address, follow_leader=False) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = list(
            stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
            )
        )
    names = {s.name for s in responses[0].list_services_response.service}
    assert names == {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}


def test_follower_redirect_is_followed(start_server: Callable[..., ServerProcess]) -> None:
    leader = start_server("leader", tracing=False)
    follower = start_server("follower", leader=leader.address, tracing=False)

    # Without following, the follower's answer says where the leader is.
    with (
        open_channel(follower.address, follow_leader=False) as plain,
        pytest.raises(grpc.RpcError) as refused,
    ):
        _echo(plain, "x")
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert leader_address_of(refused.value) == leader.address
    details = error_details(refused.value)
    assert details.reason == "NOT_LEADER"
    assert details.leader_address == leader.address

    with open_channel(follower.address) as channel:
        assert isinstance(channel, LeaderFollowingChannel)
        assert _echo(channel, "to the leader")["server"] == "leader"
        assert channel.current_address == leader.address
        # Later calls go straight to the leader.
        assert _echo(channel, "again")["server"] == "leader"


def test_dead_seed_is_skipped(start_server: Callable[..., ServerProcess]) -> None:
    leader = start_server("leader", tracing=False)
    dead = f"127.0.0.1:{free_port()}"  # nobody listens there
    with open_channel([dead, leader.address]) as channel:
        assert _echo(channel, "hi", timeout=20)["server"] == "leader"


def test_domain_errors_cross_the_wire(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server("leader", tracing=False)
    with open_channel(server.address) as channel:
        fail: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Fail")
        with pytest.raises(grpc.RpcError) as invalid:
            fail(b"invalid", timeout=10)
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        error = error_details(invalid.value)
        assert [v.field for v in error.field_violations] == ["pipeline.sink.topic"]

        with pytest.raises(grpc.RpcError) as missing:
            fail(b"not_found", timeout=10)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        not_found = error_details(missing.value)
        assert (not_found.resource_type, not_found.resource_name) == ("Pipeline", "orders")

        with pytest.raises(grpc.RpcError) as fenced:
            fail(b"fenced", timeout=10)
        assert fenced.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        fenced_error = error_details(fenced.value)
        assert fenced_error.reason == StaleTokenError.default_reason
        assert (fenced_error.metadata["presented"], fenced_error.metadata["current"]) == ("2", "3")


def test_a_sigterm_right_after_the_server_says_it_listens_stops_it_gracefully(
    start_server: Callable[..., ServerProcess],
) -> None:
    """The signal is sent the moment the server announces itself. Before the server caught
    its signals ahead of that announcement, it was still freezing its start-up heap then,
    with Python's default SIGTERM action in place, and died of the signal (-15), skipping
    its graceful stop."""
    server = start_server("leader", tracing=False)
    assert server.terminate() == 0
    assert "SIGTERM received, stopping" in server.log_path.read_text()


def test_unexpected_exception_is_internal_without_its_text(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server("leader", tracing=False)
    with open_channel(server.address) as channel, pytest.raises(grpc.RpcError) as boom:
        boom_call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{SERVICE}/Boom"
        )
        boom_call(b"", timeout=10)
    err = boom.value
    assert err.code() == grpc.StatusCode.INTERNAL
    assert "hunter2" not in (err.details() or "")
    assert isinstance(err, grpc.Call)
    assert "hunter2" not in repr(err.trailing_metadata())
    incident = error_details(err).metadata["incident_id"]
    assert server.terminate() == 0
    log = server.log_path.read_text()
    # The operator finds the traceback by the incident id.
    assert f"incident {incident}" in log
    assert "RuntimeError: could not reach the broker" in log


def test_a_request_over_the_message_bound_is_resource_exhausted_and_the_server_goes_on(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server("big", tracing=False)
    with open_channel(server.address, follow_leader=False) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            _echo(channel, "x" * (MAX_RECEIVE_MESSAGE_BYTES + 1))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Just under the bound still passes, and so does the next small call.
        assert len(_echo(channel, "x" * (MAX_RECEIVE_MESSAGE_BYTES - 64))["payload"]) > 0
        assert _echo(channel, "after")["payload"] == "after"


def test_calls_beyond_the_concurrency_bound_are_resource_exhausted_until_some_end(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # Enough worker threads that a probe runs at once rather than queue behind the holds:
    # the bound under test is the calls held, whatever the pool size.
    server = start_server("busy", tracing=False, max_workers=MAX_CONCURRENT_RPCS + 8)
    release = tmp_path / "release"
    with grpc.insecure_channel(server.address) as channel:
        hold: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/Hold")
        held = [hold.future(str(release).encode(), timeout=60) for _ in range(MAX_CONCURRENT_RPCS)]

        def refused_probe() -> grpc.RpcError | None:
            try:
                _echo(channel, "probe", timeout=5)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    return exc
                raise
            return None

        wait_for("a call beyond the bound to be refused", refused_probe, timeout_s=30)
        release.touch()
        assert [f.result(timeout=30) for f in held] == [b"released"] * MAX_CONCURRENT_RPCS
        assert _echo(channel, "after")["payload"] == "after"


def test_port_taken_names_address_and_process() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ServerBindError) as taken:
            build_server(
                service_name="plumbing-test",
                listen=f"127.0.0.1:{port}",
                register=lambda server: None,
                service_full_names=[],
            )
    message = str(taken.value)
    assert f"127.0.0.1:{port}" in message
    assert f"pid {os.getpid()}" in message


def test_bad_listen_address_is_explained() -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        build_server(
            service_name="plumbing-test",
            listen="localhost",
            register=lambda server: None,
            service_full_names=[],
        )
