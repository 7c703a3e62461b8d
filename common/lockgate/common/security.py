"""Transport security of every Lockgate process: the one home of TLS credentials and flags.

Servers (coordinator, executor, schema registry, gRPC and REST alike) take ``--tls-cert``,
``--tls-key``, ``--tls-client-ca`` (mTLS: a client certificate signed by that CA is
required), ``--auth-tokens FILE`` (see ``lockgate.common.auth``) and ``--insecure``.
``server_security`` refuses a server bound to a non-loopback address without TLS and
authentication unless ``--insecure`` says so.

Clients (the CLI, the executor's calls to the coordinator, the coordinator's calls to the
executors, the demo, the benchmarks) take ``--tls-ca``, ``--tls-client-cert``,
``--tls-client-key`` and ``--token-file``; ``client_security`` fills what is not given from
the local cluster's home (``$LOCKGATE_HOME/tls/``: ``ca.pem``, ``admin.token``) unless
``--insecure`` (or ``LOCKGATE_INSECURE=1``). A token is never a flag's value (it would show in
``ps``): it comes from a file or from ``$LOCKGATE_TOKEN``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

INSECURE_ENV = "LOCKGATE_INSECURE"
TOKEN_ENV = "LOCKGATE_TOKEN"
HOME_ENV = "LOCKGATE_HOME"
#: Where ``make certs`` writes the local cluster's CA, certificates and tokens.
TLS_DIR = "tls"


class SecurityConfigError(ValueError):
    """A TLS or authentication setting that cannot be used; the message names the flag."""


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SecurityConfigError(f"{flag} {path}: cannot read it ({exc.strerror})") from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (of a listen address) only accepts connections from this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerTls:
    """A server's certificate chain and key (PEM), and the CA of client certificates (mTLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials; with ``client_ca`` a verified client certificate is
        required (gRPC has no "request but do not require" mode)."""
        chain = _read(self.cert, "--tls-cert")
        key = _read(self.key, "--tls-key")
        ca = _read(self.client_ca, "--tls-client-ca") if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(key, chain)], root_certificates=ca, require_client_auth=ca is not None
        )


@dataclass(frozen=True)
class ServerSecurity:
    """What a server asks of its callers: TLS (or None), and the token file (or None: no
    authentication, allowed on loopback or with ``--insecure`` only)."""

    tls: ServerTls | None = None
    auth_tokens: Path | None = None


def add_server_security_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-cert``, ``--tls-key``, ``--tls-client-ca``, ``--auth-tokens``, ``--insecure``."""
    group = parser.add_argument_group("transport security")
    group.add_argument("--tls-cert", type=Path, help="server certificate chain (PEM): serve TLS")
    group.add_argument("--tls-key", type=Path, help="private key of --tls-cert (PEM)")
    group.add_argument(
        "--tls-client-ca",
        type=Path,
        help="CA of client certificates (PEM): require one signed by it (mTLS)",
    )
    group.add_argument(
        "--auth-tokens",
        type=Path,
        help="YAML file of principals, roles and SHA-256 token hashes / certificate CNs:"
        " authenticate and authorise every call",
    )
    group.add_argument(
        "--insecure",
        action="store_true",
        help="allow serving a non-loopback address without TLS and --auth-tokens",
    )


def server_security(args: argparse.Namespace, *, listen_hosts: list[str]) -> ServerSecurity:
    """The server's security from its flags; ``SecurityConfigError`` when they are
    incomplete, or when a non-loopback ``listen_hosts`` would be served without TLS and
    authentication and ``--insecure`` was not given."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise SecurityConfigError("--tls-cert and --tls-key go together; give both")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise SecurityConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = ServerTls(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    exposed = [host for host in listen_hosts if not is_loopback(host)]
    if exposed and not args.insecure and (tls is None or args.auth_tokens is None):
        missing = " and ".join(
            name
            for name, absent in (("TLS", tls is None), ("--auth-tokens", args.auth_tokens is None))
            if absent
        )
        raise SecurityConfigError(
            f"refusing to serve {', '.join(exposed)} (not loopback) without {missing}: pass"
            " --tls-cert/--tls-key and --auth-tokens, or --insecure to accept an open port"
        )
    return ServerSecurity(tls=tls, auth_tokens=args.auth_tokens)


@dataclass(frozen=True)
class ClientSecurity:
    """How a client calls a Lockgate service: TLS (the CA to verify the server against, and
    a client certificate for mTLS) and the bearer token sent as ``authorization``."""

    tls: bool = False
    ca: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    token: str | None = None

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials (TLS; with the client certificate when given)."""
        ca = _read(self.ca, "--tls-ca") if self.ca else None
        cert = _read(self.client_cert, "--tls-client-cert") if self.client_cert else None
        key = _read(self.client_key, "--tls-client-key") if self.client_key else None
        return grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The same trust and client certificate for an HTTPS client."""
        context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if self.client_cert and self.client_key:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def add_client_security_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-client-cert``, ``--tls-client-key``, ``--token-file``,
    ``--insecure`` for a process that calls Lockgate services."""
    group = parser.add_argument_group("calling Lockgate services")
    group.add_argument(
        "--tls-ca",
        type=Path,
        help="CA (PEM) to verify the services' certificates: call them over TLS (default"
        " $LOCKGATE_HOME/tls/ca.pem when it exists)",
    )
    group.add_argument("--tls-client-cert", type=Path, help="client certificate (PEM), for mTLS")
    group.add_argument("--tls-client-key", type=Path, help="key of --tls-client-cert (PEM)")
    group.add_argument(
        "--token-file",
        type=Path,
        help="file holding the bearer token sent with every call (default $LOCKGATE_TOKEN,"
        " else $LOCKGATE_HOME/tls/admin.token when it exists)",
    )
    if not any("--insecure" in action.option_strings for action in parser._actions):
        group.add_argument(
            "--insecure",
            action="store_true",
            help="call in plaintext without a token, ignoring $LOCKGATE_HOME/tls",
        )


def default_home() -> Path:
    """``$LOCKGATE_HOME``, else ``./.lockgate``."""
    return Path(os.environ.get(HOME_ENV) or ".lockgate")


def insecure_requested() -> bool:
    """Whether ``LOCKGATE_INSECURE`` is set to a true value."""
    return os.environ.get(INSECURE_ENV, "").strip().lower() in ("1", "true", "yes")


def read_token(path: Path) -> str:
    """The token stored in ``path`` (its first line, stripped)."""
    token = _read(path, "--token-file").decode().strip()
    if not token:
        raise SecurityConfigError(f"--token-file {path} is empty")
    return token


def client_security(
    args: argparse.Namespace, *, from_home: bool = True, home: Path | None = None
) -> ClientSecurity:
    """The client's security from its flags, then ``$LOCKGATE_TOKEN``, then (``from_home``:
    the CLI, the demo, the benchmarks) the local cluster's home (``tls/ca.pem`` and
    ``tls/admin.token``) when present. ``--insecure`` / ``LOCKGATE_INSECURE=1`` skip the home
    (plaintext unless a flag asks for TLS). A service (``from_home=False``) uses its flags
    only: its ``--insecure`` is about what it serves."""
    if (args.tls_client_cert is None) != (args.tls_client_key is None):
        raise SecurityConfigError("--tls-client-cert and --tls-client-key go together")
    service = not from_home
    if from_home and (getattr(args, "insecure", False) or insecure_requested()):
        from_home = False
    tls_dir = (home or default_home()) / TLS_DIR
    ca: Path | None = args.tls_ca
    if ca is None and from_home and (tls_dir / "ca.pem").is_file():
        ca = tls_dir / "ca.pem"
    token: str | None = None
    if args.token_file is not None:
        token = read_token(args.token_file)
    elif not service and os.environ.get(TOKEN_ENV, "").strip():
        token = os.environ[TOKEN_ENV].strip()
    elif from_home and (tls_dir / "admin.token").is_file():
        token = read_token(tls_dir / "admin.token")
    return ClientSecurity(
        tls=ca is not None or args.tls_client_cert is not None,
        ca=ca,
        client_cert=args.tls_client_cert,
        client_key=args.tls_client_key,
        token=token,
    )


__all__ = [
    "INSECURE_ENV",
    "TLS_DIR",
    "TOKEN_ENV",
    "ClientSecurity",
    "SecurityConfigError",
    "ServerSecurity",
    "ServerTls",
    "add_client_security_arguments",
    "add_server_security_arguments",
    "client_security",
    "is_loopback",
    "server_security",
]
