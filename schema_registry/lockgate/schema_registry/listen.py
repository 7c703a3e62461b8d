"""The registry's listening sockets: parsing ``--grpc``/``--http``, binding, and holding a
port for the worker processes (see ``server``)."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from lockgate.common.ports import describe_port_holder

SERVICE_NAME = "lockgate-schema-registry"
DEFAULT_GRPC = "127.0.0.1:7090"
DEFAULT_HTTP = "127.0.0.1:8081"


class ListenError(Exception):
    """A listen address that is malformed or taken; the message says which and what to do."""


@dataclass(frozen=True)
class Listen:
    """A parsed ``HOST:PORT`` flag value."""

    flag: str
    text: str
    host: str
    port: int

    @property
    def family(self) -> socket.AddressFamily:
        """IPv6 for a bracketed or colon-holding host, else IPv4."""
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    def with_port(self, port: int) -> str:
        """``HOST:PORT`` as gRPC wants it (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{port}"


def parse_listen(flag: str, listen: str, example: str) -> Listen:
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ListenError(f"{flag} {listen!r} is not HOST:PORT (e.g. {example})")
    return Listen(flag=flag, text=listen, host=host, port=int(port_text))


def tcp_socket(listen: Listen) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it Nagle + delayed ACK add ~40 ms to every response.
    sock = socket.socket(listen.family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def taken_message(listen: Listen, exc: OSError, port: int) -> str:
    taken = exc.errno == errno.EADDRINUSE and port
    holder = describe_port_holder(port, listen.host) if taken else None
    reason = f"port {port} is in use by {holder}" if holder else (exc.strerror or str(exc))
    return (
        f"{SERVICE_NAME} cannot listen on {listen.flag} {listen.text}: {reason}; stop what"
        " holds it or choose another port"
    )


def bind_http(listen_text: str) -> socket.socket:
    """The REST listening socket of a single-process registry."""
    try:
        listen = parse_listen("--http", listen_text, DEFAULT_HTTP)
    except ListenError as exc:
        raise SystemExit(str(exc)) from None
    sock = tcp_socket(listen)
    try:
        sock.bind((listen.host, listen.port))
    except OSError as exc:
        sock.close()
        raise SystemExit(taken_message(listen, exc, listen.port)) from None
    sock.listen(1024)
    return sock


def reserve_port(listen: Listen) -> socket.socket:
    """Check that ``listen`` is free, then hold its port for the workers to share.

    The check binds without ``SO_REUSEPORT`` (so a port someone else listens on, with or
    without that option, is refused and its holder named); the reservation is a bound,
    never listening, ``SO_REUSEPORT`` socket, which receives no connections but keeps the
    port (and, for port 0, the port the kernel picked) until the workers have bound it.
    """
    if listen.port:
        probe = tcp_socket(listen)
        try:
            probe.bind((listen.host, listen.port))
        except OSError as exc:
            raise ListenError(taken_message(listen, exc, listen.port)) from None
        finally:
            probe.close()
    reservation = tcp_socket(listen)
    reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reservation.bind((listen.host, listen.port))
    except OSError as exc:
        reservation.close()
        raise ListenError(taken_message(listen, exc, listen.port)) from None
    return reservation


def reserve_ports(listens: tuple[Listen, ...]) -> list[socket.socket]:
    """Bind every address now, so a taken port fails before any worker starts (and port 0
    becomes a real port the workers share); ListenError names the one that failed."""
    reservations: list[socket.socket] = []
    try:
        for listen in listens:
            reservations.append(reserve_port(listen))
    except ListenError:
        for sock in reservations:
            sock.close()
        raise
    return reservations
