"""Benchmark of the schema registry over loopback: lookups by id and registrations.

Starts one registry process (SQLite in a temporary directory, or ``--db URL``), registers
schemas, then hammers ``GET /schemas/ids/{id}`` (REST) and ``GetSchema`` (gRPC) from
``--connections`` concurrent keep-alive clients for ``--seconds`` each, and prints
lookups/s with p50/p99 latency, and registrations/s. Not part of pass/fail.

    .venv/bin/python bench/schema_registry.py [--seconds 5] [--connections 8] [--schemas 200]

The load generator is deliberately thin (raw HTTP/1.1 on asyncio streams, grpc.aio) so
that it measures the server, not the client; both share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import grpc
import httpx

from lockgate.v1 import schema_registry_pb2 as pb
from lockgate.v1 import schema_registry_pb2_grpc as pb_grpc

TARGET_LOOKUPS_PER_S = 5000
TARGET_P99_MS = 5.0


@dataclass(frozen=True)
class Result:
    """One measured run."""

    name: str
    operations: int
    seconds: float
    latencies_s: list[float]
    #: CPU seconds the registry process used during the run (0 when not measured).
    server_cpu_s: float = 0.0

    @property
    def per_second(self) -> float:
        """Operations per second."""
        return self.operations / self.seconds

    def percentile_ms(self, fraction: float) -> float:
        """Latency percentile in milliseconds."""
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_registry(db_url: str) -> tuple[subprocess.Popen[str], str, str]:
    """Start the registry on free ports; returns (process, grpc address, http address)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockgate.schema_registry",
            "--db",
            db_url,
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, OTEL_SDK_DISABLED="true"),
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        match = re.search(r"ready grpc=(\S+) http=(\S+)", line)
        if match:
            return process, match.group(1), match.group(2)
    process.kill()
    raise SystemExit("the registry did not start within 60 s")


def schema(index: int, prefix: str) -> str:
    """A distinct record schema."""
    return json.dumps(
        {
            "type": "record",
            "name": f"{prefix}{index}",
            "namespace": "bench",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "payload", "type": "string", "default": ""},
            ],
        }
    )


def bench_rest_registrations(http: str, count: int) -> tuple[Result, list[int]]:
    """Register ``count`` schemas over REST, one at a time."""
    ids: list[int] = []
    latencies: list[float] = []
    with httpx.Client(base_url=f"http://{http}") as client:
        began = time.perf_counter()
        for index in range(count):
            t0 = time.perf_counter()
            response = client.post(
                f"/subjects/rest-{index}/versions", json={"schema": schema(index, "Rest")}
            )
            latencies.append(time.perf_counter() - t0)
            response.raise_for_status()
            ids.append(int(response.json()["id"]))
        elapsed = time.perf_counter() - began
    return Result("REST registrations", count, elapsed, latencies), ids


def bench_grpc_registrations(address: str, count: int) -> Result:
    """Register ``count`` schemas over gRPC, one at a time."""
    latencies: list[float] = []
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.SchemaRegistryServiceStub(channel)
        began = time.perf_counter()
        for index in range(count):
            t0 = time.perf_counter()
            stub.RegisterSchema(
                pb.RegisterSchemaRequest(subject=f"grpc-{index}", schema=schema(index, "Grpc"))
            )
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - began
    return Result("gRPC registrations", count, elapsed, latencies)


async def _rest_worker(
    host: str, port: int, ids: list[int], stop_at: float, latencies: list[float], offset: int
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    requests = [f"GET /schemas/ids/{i} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() for i in ids]
    index = offset
    try:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            writer.write(requests[index % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))  # type: ignore[union-attr]
            body = await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"lookup failed: {head!r} {body!r}")
            index += 1
    finally:
        writer.close()


async def bench_rest_lookups(http: str, ids: list[int], seconds: float, connections: int) -> Result:
    """Concurrent ``GET /schemas/ids/{id}`` on keep-alive connections."""
    host, port = http.rsplit(":", 1)
    latencies: list[float] = []
    began = time.perf_counter()
    stop_at = began + seconds
    await asyncio.gather(
        *(_rest_worker(host, int(port), ids, stop_at, latencies, n * 7) for n in range(connections))
    )
    return Result("REST lookups by id", len(latencies), time.perf_counter() - began, latencies)


async def bench_grpc_lookups(
    address: str, ids: list[int], seconds: float, connections: int
) -> Result:
    """Concurrent ``GetSchema`` calls on one HTTP/2 channel."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.SchemaRegistryServiceStub(channel)
        requests = [pb.GetSchemaRequest(schema_id=i) for i in ids]
        began = time.perf_counter()
        stop_at = began + seconds

        async def worker(offset: int) -> None:
            index = offset
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                await stub.GetSchema(requests[index % len(requests)])
                latencies.append(time.perf_counter() - t0)
                index += 1

        await asyncio.gather(*(worker(n * 7) for n in range(connections)))
        return Result("gRPC lookups by id", len(latencies), time.perf_counter() - began, latencies)


def report(result: Result, lookup: bool) -> str:
    """One line of the table, with the verdict against the target for lookups."""
    line = (
        f"{result.name:<22} {result.per_second:>9.0f}/s  p50 {result.percentile_ms(0.50):6.2f} ms"
        f"  p99 {result.percentile_ms(0.99):6.2f} ms"
        f"  ({result.operations} in {result.seconds:.1f} s)"
    )
    if result.server_cpu_s:
        per_op_us = result.server_cpu_s / result.operations * 1e6
        per_cpu_s = result.operations / result.server_cpu_s
        line += f"  server CPU {per_op_us:.0f} us/op ({per_cpu_s:.0f}/CPU-s)"
    if lookup:
        ok = (
            result.per_second >= TARGET_LOOKUPS_PER_S and result.percentile_ms(0.99) < TARGET_P99_MS
        )
        verdict = "MET" if ok else "MISSED"
        line += f"  target >= {TARGET_LOOKUPS_PER_S}/s & p99 < {TARGET_P99_MS} ms: {verdict}"
    return line


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in a temp dir)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each lookup run")
    parser.add_argument("--connections", type=int, default=8, help="concurrent clients")
    parser.add_argument("--schemas", type=int, default=200, help="schemas registered per transport")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-sr-") as home:
        db_url = args.db or f"sqlite:///{home}/registry.db"
        process, grpc_address, http_address = start_registry(db_url)
        try:
            load = os.getloadavg()[0]
            print(
                f"registry: grpc={grpc_address} http={http_address}"
                f" db={db_url.split('://')[0]} cpus={os.cpu_count()} load(1m)={load:.1f}"
            )
            rest_reg, ids = bench_rest_registrations(http_address, args.schemas)
            grpc_reg = bench_grpc_registrations(grpc_address, args.schemas)
            # Warm-up: the first lookup of an id fills the cache (ids never change meaning).
            asyncio.run(bench_rest_lookups(http_address, ids, 0.5, 2))
            cpu0 = cpu_seconds(process.pid)
            rest = asyncio.run(
                bench_rest_lookups(http_address, ids, args.seconds, args.connections)
            )
            cpu1 = cpu_seconds(process.pid)
            grpc_lookups = asyncio.run(
                bench_grpc_lookups(grpc_address, ids, args.seconds, args.connections)
            )
            cpu2 = cpu_seconds(process.pid)
            rest = dataclasses.replace(rest, server_cpu_s=cpu1 - cpu0)
            grpc_lookups = dataclasses.replace(grpc_lookups, server_cpu_s=cpu2 - cpu1)
            print(report(rest, lookup=True))
            print(report(grpc_lookups, lookup=True))
            print(report(rest_reg, lookup=False))
            print(report(grpc_reg, lookup=False))
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
