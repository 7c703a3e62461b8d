"""The test suite's own rules: how a test waits, and that a unit test opens no socket."""

from __future__ import annotations

import socket

import pytest

from tests.support.waits import wait_for


def test_wait_for_returns_the_conditions_first_truthy_value() -> None:
    answers = iter([None, 0, "", "leader c2"])
    assert wait_for("a leader", lambda: next(answers), timeout_s=5) == "leader c2"


def test_wait_for_names_what_it_waited_for_and_the_last_error() -> None:
    def unreachable() -> bool:
        raise ConnectionRefusedError("127.0.0.1:1 refused")

    with pytest.raises(AssertionError) as failure:
        wait_for("the replica to answer", unreachable, timeout_s=0.05, explain=lambda: "log tail")
    message = str(failure.value)
    assert "waiting for the replica to answer" in message
    assert "ConnectionRefusedError: 127.0.0.1:1 refused" in message
    assert message.endswith("log tail")
    assert isinstance(failure.value.__cause__, ConnectionRefusedError)


def test_wait_for_gives_up_at_once_when_the_awaited_process_died() -> None:
    with pytest.raises(AssertionError, match="gave up waiting for e1 to register: exited with 3"):
        wait_for("e1 to register", lambda: False, timeout_s=60, abort_if=lambda: "exited with 3")


def test_a_unit_test_is_marked_unit_by_its_folder(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None


def test_a_unit_test_that_opens_a_socket_fails() -> None:
    with socket.socket() as sock, pytest.raises(pytest.fail.Exception, match="opened a socket"):
        sock.bind(("127.0.0.1", 0))
