"""The Prometheus scrape endpoint of a service: ``--metrics-listen HOST:PORT``.

The OpenTelemetry Prometheus reader turns the service's metrics (``lockgate.common.metrics``)
into Prometheus' text format at ``http://HOST:PORT/metrics``, served by
``prometheus_client``'s HTTP server on a daemon thread. It is one more metric reader beside
the ``OTEL_METRICS_EXPORTER`` ones, so OTLP export keeps working with it.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, start_http_server

from lockgate.common.telemetry import Telemetry, setup_telemetry

METRICS_LISTEN_FLAG = "--metrics-listen"
_LOG = logging.getLogger(__name__)


class MetricsListenError(ValueError):
    """``--metrics-listen`` is malformed or its port cannot be bound; the message names
    the flag and the fix."""


def add_metrics_listen_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--metrics-listen HOST:PORT`` (off unless given) to a service's parser."""
    parser.add_argument(
        METRICS_LISTEN_FLAG,
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off unless given; "
        "port 0: any free port)",
    )


def parse_metrics_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``MetricsListenError`` naming the flag and the fix."""
    host, sep, port_text = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise MetricsListenError(
            f"{METRICS_LISTEN_FLAG} {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9470 "
            "(port 0: any free port)"
        )
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise MetricsListenError(
                f"{METRICS_LISTEN_FLAG} {listen!r}: {host!r} is not an IP address or "
                "localhost; pass the address of the interface to serve on"
            ) from None
    return host, int(port_text)


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` endpoint and the metric reader that feeds it."""

    reader: PrometheusMetricReader
    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def address(self) -> str:
        """``host:port`` actually bound (the real port when asked for port 0)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def start(cls, listen: str) -> MetricsEndpoint:
        """Bind ``listen`` and serve ``/metrics`` from a daemon thread; ``MetricsListenError``
        if the address is malformed or taken. Give ``reader`` to ``setup_telemetry``."""
        host, port = parse_metrics_listen(listen)
        registry = CollectorRegistry(auto_describe=True)
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise MetricsListenError(
                f"{METRICS_LISTEN_FLAG} {listen}: cannot listen ({exc.strerror or exc}); "
                "choose a free port"
            ) from None
        reader = PrometheusMetricReader(registry=registry)
        endpoint = cls(
            reader=reader,
            host=host,
            port=int(server.server_address[1]),
            _server=server,
            _thread=thread,
        )
        # Tests and operators find a port-0 endpoint by this line.
        _LOG.info("metrics at http://%s/metrics", endpoint.address)
        return endpoint

    @classmethod
    def start_if_enabled(cls, listen: str | None, *, index: int = 0) -> MetricsEndpoint | None:
        """``start`` unless ``listen`` is None or ``OTEL_SDK_DISABLED=true`` (the SDK then
        records nothing: warn rather than serve an empty page). ``index``: worker ``index``
        of a multi-process service serves ``listen``'s port + ``index`` (0 stays 0)."""
        if listen is None:
            return None
        host, port = parse_metrics_listen(listen)
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() in ("true", "1", "yes", "on"):
            _LOG.warning("%s %s ignored: OTEL_SDK_DISABLED=true", METRICS_LISTEN_FLAG, listen)
            return None
        shown = f"[{host}]" if ":" in host else host
        return cls.start(f"{shown}:{port + index if port else 0}")

    @property
    def readers(self) -> list[PrometheusMetricReader]:
        """The reader to give ``setup_telemetry``, as a list."""
        return [self.reader]

    def stop(self) -> None:
        """Stop serving (the reader stops with its meter provider)."""
        self._server.shutdown()
        self._server.server_close()


def start_telemetry(
    service_name: str, *, metrics_listen: str | None, service_instance_id: str | None = None
) -> Telemetry:
    """``setup_telemetry`` plus, with ``metrics_listen``, the ``/metrics`` endpoint.

    Raises ``TelemetryConfigError`` (a bad ``OTEL_*`` variable) or ``MetricsListenError``.
    """
    endpoint = MetricsEndpoint.start_if_enabled(metrics_listen)
    telemetry = setup_telemetry(
        service_name,
        service_instance_id=service_instance_id,
        metric_readers=endpoint.readers if endpoint else [],
    )
    return telemetry


__all__ = [
    "METRICS_LISTEN_FLAG",
    "MetricsEndpoint",
    "MetricsListenError",
    "add_metrics_listen_argument",
    "parse_metrics_listen",
    "start_telemetry",
]
