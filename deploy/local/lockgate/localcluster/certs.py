"""The local cluster's CA, certificates and tokens (``make certs``), with ``cryptography``.

``python -m lockgate.localcluster.certs [--home DIR] [--executor e1 ...]`` makes, under
``<home>/tls/`` (``$LOCKGATE_HOME/tls``, else ``.lockgate/tls``), what is missing of:

- ``ca.pem``, ``ca.key``: the local CA (EC P-256, 10 years); clients trust ``ca.pem``;
- ``server.pem``, ``server.key``: every service's server certificate (``127.0.0.1``,
  ``::1``, ``localhost``);
- ``coordinator.pem``, ``coordinator.key``: the coordinators' client identity (CN
  ``coordinator``), the only one the executors accept;
- ``tokens.yaml``: the ``--auth-tokens`` file (hashed tokens, and the ``coordinator``
  certificate entry);
- ``admin.token``: the admin's bearer token (the CLI, the demo and the benchmarks read it);
- ``executor-<id>.token``: executor ``<id>``'s token (principal ``<id>``, role ``executor``).

Keys and tokens are written mode 600. Running it again keeps what exists and adds only
missing executor tokens, so services already started keep trusting the same CA.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lockgate.common.auth import append_token_entry
from lockgate.common.security import TLS_DIR, ClientSecurity, read_token
from lockgate.localcluster.process import lockgate_home

_VALID = datetime.timedelta(days=3650)
COORDINATOR_CN = "coordinator"


@dataclass(frozen=True)
class LocalPki:
    """Paths of the local cluster's security material."""

    directory: Path

    @property
    def ca(self) -> Path:
        """The CA certificate every client trusts."""
        return self.directory / "ca.pem"

    @property
    def server_cert(self) -> Path:
        """The services' server certificate (127.0.0.1, ::1, localhost)."""
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        """Its key."""
        return self.directory / "server.key"

    @property
    def coordinator_cert(self) -> Path:
        """The coordinators' client certificate (CN ``coordinator``)."""
        return self.directory / "coordinator.pem"

    @property
    def coordinator_key(self) -> Path:
        """Its key."""
        return self.directory / "coordinator.key"

    @property
    def tokens(self) -> Path:
        """The ``--auth-tokens`` file."""
        return self.directory / "tokens.yaml"

    @property
    def admin_token(self) -> Path:
        """The admin's token."""
        return self.directory / "admin.token"

    def executor_token(self, executor_id: str) -> Path:
        """Executor ``executor_id``'s token."""
        return self.directory / f"executor-{executor_id}.token"

    def client_cert(self, name: str) -> tuple[Path, Path]:
        """A client identity's certificate and key (``issue_client_cert``)."""
        return self.directory / f"{name}.pem", self.directory / f"{name}.key"

    def _serving(self) -> list[str]:
        return ["--tls-cert", str(self.server_cert), "--tls-key", str(self.server_key)]

    def coordinator_args(self) -> list[str]:
        """A coordinator's flags: TLS and tokens for its callers; the ``coordinator``
        certificate for its calls to the executors."""
        cert, key = self.coordinator_cert, self.coordinator_key
        return [
            *self._serving(),
            *("--auth-tokens", str(self.tokens), "--tls-ca", str(self.ca)),
            *("--tls-client-cert", str(cert), "--tls-client-key", str(key)),
        ]

    def executor_args(self, executor_id: str) -> list[str]:
        """An executor's flags: mTLS (only the coordinator's certificate gets in) and its
        own token for its calls to the coordinators."""
        return [
            *self._serving(),
            *("--tls-client-ca", str(self.ca), "--auth-tokens", str(self.tokens)),
            *("--tls-ca", str(self.ca), "--token-file", str(self.executor_token(executor_id))),
        ]

    def executor_env(self, executor_id: str) -> dict[str, str]:
        """An executor's environment: how its Spark workers reach the HTTPS registry (its
        own token; ``lockgate.schema_registry.serde``)."""
        return {
            "LOCKGATE_SCHEMA_REGISTRY_CA": str(self.ca),
            "LOCKGATE_SCHEMA_REGISTRY_TOKEN_FILE": str(self.executor_token(executor_id)),
        }

    def registry_args(self) -> list[str]:
        """The registry's flags: TLS (gRPC and HTTPS) and tokens."""
        return [*self._serving(), "--auth-tokens", str(self.tokens)]

    def as_coordinator(self) -> ClientSecurity:
        """Calling as the coordinators do (the executors' readiness probe uses it)."""
        return ClientSecurity(
            tls=True, ca=self.ca, client_cert=self.coordinator_cert, client_key=self.coordinator_key
        )

    def as_admin(self) -> ClientSecurity:
        """Calling as the admin (TLS, the admin token)."""
        return ClientSecurity(tls=True, ca=self.ca, token=read_token(self.admin_token))


def _write(path: Path, data: bytes, *, secret: bool) -> None:
    path.write_bytes(data)
    if secret:
        path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _builder(
    subject: str, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
    )


def _make_ca(pki: LocalPki) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Lockgate local CA")])
    cert = (
        _builder("Lockgate local CA", name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write(pki.directory / "ca.key", _key_pem(key), secret=True)
    _write(pki.ca, cert.public_bytes(serialization.Encoding.PEM), secret=False)


def _load_ca(pki: LocalPki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key = serialization.load_pem_private_key((pki.directory / "ca.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def _issue(
    pki: LocalPki,
    name: str,
    *,
    server: bool,
    cert_path: Path,
    key_path: Path,
    uri: str | None = None,
) -> None:
    ca_cert, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(name, ca_cert.subject, key.public_key()).add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        if uri is not None:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]), critical=False
            )
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(key_path, _key_pem(key), secret=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), secret=False)


def issue_client_cert(pki: LocalPki, name: str, *, uri: str | None = None) -> tuple[Path, Path]:
    """A client certificate with CN ``name`` (and URI SAN ``uri``) signed by the local CA
    (its cert and key)."""
    cert_path, key_path = pki.client_cert(name)
    _issue(pki, name, server=False, cert_path=cert_path, key_path=key_path, uri=uri)
    return cert_path, key_path


def add_principal(pki: LocalPki, *, principal: str, roles: Sequence[str], token_file: Path) -> str:
    """A new token for ``principal`` with ``roles``: its hash appended to ``tokens.yaml``
    (``lockgate auth token create``'s own function), the token written to ``token_file``
    (mode 600) and returned."""
    token = append_token_entry(pki.tokens, principal=principal, roles=roles)
    _write(token_file, (token + "\n").encode(), secret=True)
    return token


def ensure_local_pki(home: Path, executor_ids: Sequence[str] = ()) -> LocalPki:
    """Make what is missing of the files in the module docstring; return their paths."""
    pki = LocalPki(home / TLS_DIR)
    pki.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(pki.directory, 0o700)
    if not pki.ca.exists():
        _make_ca(pki)
    if not pki.server_cert.exists():
        _issue(pki, "localhost", server=True, cert_path=pki.server_cert, key_path=pki.server_key)
    if not pki.coordinator_cert.exists():
        issue_client_cert(pki, COORDINATOR_CN)
        entry = {
            "principal": COORDINATOR_CN,
            "roles": ["coordinator"],
            "certificate_cn": COORDINATOR_CN,
        }
        with pki.tokens.open("a", encoding="utf-8") as tokens:
            tokens.write(yaml.safe_dump([entry], sort_keys=False))
        pki.tokens.chmod(0o600)
    if not pki.admin_token.exists():
        add_principal(pki, principal="admin", roles=["admin"], token_file=pki.admin_token)
    for executor_id in executor_ids:
        if not pki.executor_token(executor_id).exists():
            add_principal(
                pki,
                principal=executor_id,
                roles=["executor"],
                token_file=pki.executor_token(executor_id),
            )
    return pki


def main(argv: Sequence[str] | None = None) -> int:
    """``make certs``."""
    parser = argparse.ArgumentParser(prog="python -m lockgate.localcluster.certs")
    parser.add_argument(
        "--home", type=Path, default=None, help="default $LOCKGATE_HOME or .lockgate"
    )
    parser.add_argument(
        "--executor", action="append", default=[], help="executor id to make a token for"
    )
    args = parser.parse_args(argv)
    pki = ensure_local_pki(lockgate_home(args.home), args.executor)
    print(f"local CA, certificates and tokens in {pki.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
