"""Who is calling, and may they: the ``--auth-tokens`` file and the server interceptor.

The file is YAML, a list of principals::

    - principal: alice            # a person or a program, with a bearer token
      roles: [admin]
      token_sha256: 9f86d0...     # hex SHA-256 of the token; the token itself is not kept
    - principal: e1               # an executor's mTLS identity
      roles: [executor]
      certificate_cn: executor-e1 # the client certificate's subject CN (or URI SAN)

A caller proves who it is with ``authorization: Bearer <token>`` metadata (HTTP: the same
header, or HTTP Basic with the principal as user and the token as password), or with a
client certificate whose CN or URI SAN an entry names (the server must verify client
certificates: ``--tls-client-ca``). Tokens are hashed at rest with a single SHA-256: tokens
made by ``lockgate auth token create`` carry 256 random bits, so a slow password hash would
add nothing against guessing while costing every call; the comparison is constant-time.

``AuthInterceptor`` answers ``UNAUTHENTICATED`` when no known identity comes with a call and
``PERMISSION_DENIED`` when the identity's roles are not in the method's row of
``lockgate.common.access`` (or the row is missing), and for the ``executor`` role when the
request's ``executor_id`` is not the principal. Health and reflection pass through.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import yaml

from lockgate.common.access import MethodAccess, Role, access_of
from lockgate.common.errors import PermissionDenied, Unauthenticated
from lockgate.common.grpc_server import _Behavior, _rewrap, _WrappingInterceptor
from lockgate.common.security import SecurityConfigError

_LOG = logging.getLogger(__name__)
_ROLE_NAMES = ", ".join(role.value for role in Role)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its name and roles."""

    name: str
    roles: frozenset[Role]


@dataclass(frozen=True)
class _Entry:
    principal: Principal
    token_sha256: str | None
    certificate_cn: str | None


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the file stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A new bearer token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def _parse_entry(raw: Any, where: str) -> _Entry:
    if not isinstance(raw, dict):
        raise SecurityConfigError(f"{where}: expected a mapping with principal and roles")
    unknown = set(raw) - {"principal", "roles", "token_sha256", "certificate_cn"}
    if unknown:
        raise SecurityConfigError(f"{where}: unknown keys {sorted(unknown)}")
    name = raw.get("principal")
    if not isinstance(name, str) or not name.strip():
        raise SecurityConfigError(f"{where}: principal must be a non-empty string")
    roles = raw.get("roles")
    if not isinstance(roles, list) or not roles:
        raise SecurityConfigError(f"{where}: roles must be a non-empty list of {_ROLE_NAMES}")
    try:
        parsed_roles = frozenset(Role(role) for role in roles)
    except ValueError:
        raise SecurityConfigError(
            f"{where}: roles {roles} must each be one of {_ROLE_NAMES}"
        ) from None
    digest, cn = raw.get("token_sha256"), raw.get("certificate_cn")
    if digest is None and cn is None:
        raise SecurityConfigError(f"{where}: give token_sha256 or certificate_cn (or both)")
    if digest is not None and (
        not isinstance(digest, str)
        or len(digest) != 64
        or any(c not in "0123456789abcdef" for c in digest.lower())
    ):
        raise SecurityConfigError(
            f"{where}: token_sha256 must be 64 hex digits (the SHA-256 of the token, not the"
            " token itself; `lockgate auth token create` writes it)"
        )
    if cn is not None and (not isinstance(cn, str) or not cn):
        raise SecurityConfigError(f"{where}: certificate_cn must be a non-empty string")
    return _Entry(Principal(name, parsed_roles), digest.lower() if digest else None, cn)


class Authenticator:
    """The principals of one ``--auth-tokens`` file."""

    def __init__(self, entries: Iterable[_Entry]) -> None:
        self._entries = tuple(entries)
        self._by_cn = {e.certificate_cn: e.principal for e in self._entries if e.certificate_cn}

    @classmethod
    def from_file(cls, path: Path) -> Authenticator:
        """Read and check the file; ``SecurityConfigError`` names the entry that is wrong."""
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise SecurityConfigError(
                f"--auth-tokens {path}: cannot read ({exc.strerror})"
            ) from None
        except yaml.YAMLError as exc:
            raise SecurityConfigError(f"--auth-tokens {path}: not YAML ({exc})") from None
        if not isinstance(raw, list):
            raise SecurityConfigError(f"--auth-tokens {path}: expected a list of principals")
        return cls(
            _parse_entry(item, f"--auth-tokens {path} entry {i}") for i, item in enumerate(raw)
        )

    def by_token(self, token: str) -> Principal | None:
        """The principal whose token hashes to the stored hash, if any."""
        digest = hash_token(token)
        found = None
        for entry in self._entries:  # no early exit: the time does not say which entry
            if entry.token_sha256 and hmac.compare_digest(entry.token_sha256, digest):
                found = entry.principal
        return found

    def by_certificate(self, names: Sequence[str]) -> Principal | None:
        """The principal of a verified client certificate's CN or URI SANs, if named."""
        for name in names:
            principal = self._by_cn.get(name)
            if principal is not None:
                return principal
        return None

    def from_authorization(self, header: str) -> Principal | None:
        """The principal of an ``Authorization`` value: ``Bearer <token>`` or HTTP ``Basic``
        (user = principal, password = token)."""
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() == "bearer":
            return self.by_token(credentials.strip())
        if scheme.lower() == "basic":
            try:
                user, sep, password = (
                    base64.b64decode(credentials, validate=True).decode().partition(":")
                )
            except (ValueError, UnicodeDecodeError):
                return None
            principal = self.by_token(password) if sep else None
            return principal if principal is not None and principal.name == user else None
        return None


def authorize(
    access: MethodAccess | None, principal: Principal, *, executor_id: str | None, method: str
) -> None:
    """Raise ``PermissionDenied`` unless ``principal`` may call ``method`` (with a request
    for ``executor_id`` when the method is an executor's own)."""
    if access is None:
        raise PermissionDenied(f"{method} is not open to any role")
    allowed = principal.roles & access.roles
    if not allowed:
        roles = ", ".join(sorted(role.value for role in access.roles))
        raise PermissionDenied(
            f"{principal.name} may not call {method}: it needs one of the roles {roles}"
        )
    if access.own_executor and allowed == {Role.EXECUTOR} and executor_id != principal.name:
        raise PermissionDenied(
            f"{principal.name} may call {method} only for its own executor id"
            f" ({principal.name!r}), not for {executor_id!r}"
        )


def _certificate_names(context: grpc.ServicerContext) -> list[str]:
    # Each key maps to a list of values; types-grpcio says a single bytes.
    auth: Mapping[str, Sequence[bytes]] = cast(Any, context.auth_context())
    return [
        value.decode(errors="replace")
        for key in ("x509_common_name", "peer_uri")
        for value in auth.get(key, ())
    ]


def _metadata_authorization(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


class AuthInterceptor(_WrappingInterceptor):
    """Authenticates each call and authorises it from ``lockgate.common.access`` (see the
    module docstring). Sits inside the error mapping, which turns its errors into statuses."""

    def __init__(self, authenticator: Authenticator) -> None:
        super().__init__()
        self._authenticator = authenticator

    def principal_of(self, context: grpc.ServicerContext) -> Principal:
        """The caller's principal; ``Unauthenticated`` when it brought no known identity."""
        header = _metadata_authorization(context.invocation_metadata())
        if header is not None:
            principal = self._authenticator.from_authorization(header)
            if principal is None:
                raise Unauthenticated(
                    "the authorization metadata names no known principal: send"
                    " 'authorization: Bearer <token>' with a token of the server's --auth-tokens"
                )
            return principal
        principal = self._authenticator.by_certificate(_certificate_names(context))
        if principal is None:
            raise Unauthenticated(
                "no credentials: send 'authorization: Bearer <token>' metadata, or a client"
                " certificate whose CN the server's --auth-tokens file names"
            )
        return principal

    def _wrapped(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        access = access_of(method)

        def guard(behavior: _Behavior) -> _Behavior:
            def call(request: Any, context: grpc.ServicerContext) -> Any:
                principal = self.principal_of(context)
                executor_id = getattr(request, "executor_id", None)
                authorize(access, principal, executor_id=executor_id, method=method)
                return behavior(request, context)

            return call

        return _rewrap(handler, unary_response=guard, stream_response=guard)


def load_authenticator(path: Path | None) -> Authenticator | None:
    """The authenticator of ``--auth-tokens`` (None when not given)."""
    return None if path is None else Authenticator.from_file(path)


def append_token_entry(path: Path, *, principal: str, roles: Sequence[str]) -> str:
    """Make a token for ``principal`` with ``roles``, append its hashed entry to ``path``
    (created if missing, mode 600), and return the token (shown once, stored nowhere)."""
    for role in roles:
        if role not in {r.value for r in Role}:
            raise SecurityConfigError(f"--role {role!r} is not one of {_ROLE_NAMES}")
    if not principal.strip():
        raise SecurityConfigError("--principal must be a non-empty name")
    if path.exists():
        Authenticator.from_file(path)  # refuse to append to a broken file
    token = new_token()
    entry = yaml.safe_dump(
        [{"principal": principal, "roles": list(roles), "token_sha256": hash_token(token)}],
        sort_keys=False,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(entry)
    path.chmod(0o600)
    return token


def headers_authorization(
    headers: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]],
) -> str | None:
    """The ``Authorization`` value of ASGI headers, if any."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key.lower() == b"authorization":
            return value.decode("latin-1")
    return None


__all__ = [
    "AuthInterceptor",
    "Authenticator",
    "Principal",
    "append_token_entry",
    "authorize",
    "hash_token",
    "headers_authorization",
    "load_authenticator",
    "new_token",
]
