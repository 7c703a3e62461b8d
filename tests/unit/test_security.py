"""Server and client transport settings from their flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lockgate.common.security import (
    SecurityConfigError,
    add_client_security_arguments,
    add_server_security_arguments,
    client_security,
    is_loopback,
    server_security,
)


def _server_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_server_security_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "localhost", "[::1]", "::1"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "10.1.2.3", "example.com"])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_a_non_loopback_server_without_tls_refuses_to_start_unless_insecure() -> None:
    with pytest.raises(SecurityConfigError, match=r"0\.0\.0\.0 .*without TLS and --auth-tokens"):
        server_security(_server_args(), listen_hosts=["0.0.0.0"])
    assert server_security(_server_args("--insecure"), listen_hosts=["0.0.0.0"]).tls is None
    assert server_security(_server_args(), listen_hosts=["127.0.0.1"]).tls is None


def test_tls_without_tokens_on_a_public_address_is_refused_too() -> None:
    args = _server_args("--tls-cert", "c.pem", "--tls-key", "k.pem")
    with pytest.raises(SecurityConfigError, match="without --auth-tokens"):
        server_security(args, listen_hosts=["0.0.0.0"])


def test_tls_cert_needs_its_key() -> None:
    with pytest.raises(SecurityConfigError, match="go together"):
        server_security(_server_args("--tls-cert", "c.pem"), listen_hosts=["127.0.0.1"])


def test_client_finds_ca_and_admin_token_in_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCKGATE_TOKEN", raising=False)
    monkeypatch.delenv("LOCKGATE_INSECURE", raising=False)
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "ca.pem").write_text("pem")
    (tmp_path / "tls" / "admin.token").write_text("tok\n")
    parser = argparse.ArgumentParser()
    add_client_security_arguments(parser)
    found = client_security(parser.parse_args([]), home=tmp_path)
    assert found.tls and found.ca == tmp_path / "tls" / "ca.pem" and found.token == "tok"
    insecure = client_security(parser.parse_args(["--insecure"]), home=tmp_path)
    assert not insecure.tls and insecure.token is None
    # A service uses its own flags only.
    assert not client_security(parser.parse_args([]), home=tmp_path, from_home=False).tls


def test_a_service_ignores_the_cli_token_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_TOKEN", "the-admin-token-of-this-shell")
    parser = argparse.ArgumentParser()
    add_client_security_arguments(parser)
    assert client_security(parser.parse_args([]), from_home=False).token is None
    assert client_security(parser.parse_args([])).token == "the-admin-token-of-this-shell"
