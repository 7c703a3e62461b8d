"""Parsing and firing of LOCKGATE_FAILPOINTS."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from lockgate.common.failpoints import (
    FAILPOINT_HOLD_DIR_ENV,
    FAILPOINTS_ENV,
    ArmedFailpoint,
    Failpoint,
    FailpointConfigError,
    Failpoints,
    parse_failpoints,
)
from tests.support.waits import wait_for


class _Exited(Exception):
    pass


def _recorder(messages: list[str]) -> Failpoints:
    def exit_process(message: str) -> None:
        messages.append(message)
        raise _Exited(message)

    return Failpoints(
        parse_failpoints("after_precommit_before_report,mid_commit_handles@2"),
        exit_process=exit_process,
    )


def test_parse_names_and_counts() -> None:
    assert parse_failpoints("") == ()
    assert parse_failpoints(" after_commit_before_ack , MID_COMMIT_HANDLES@3 ") == (
        ArmedFailpoint(Failpoint.AFTER_COMMIT_BEFORE_ACK, 1),
        ArmedFailpoint(Failpoint.MID_COMMIT_HANDLES, 3),
    )
    assert {f.value for f in Failpoint} == {
        "after_precommit_before_report",
        "after_complete_before_commit",
        "mid_commit_handles",
        "after_commit_before_ack",
        "before_init_transactions",
        "inside_complete_transaction",
    }


def test_unknown_name_is_refused_with_the_valid_names() -> None:
    with pytest.raises(FailpointConfigError) as refused:
        parse_failpoints("after_precommit_before_reprot")
    message = str(refused.value)
    assert FAILPOINTS_ENV in message
    assert "'after_precommit_before_reprot'" in message
    assert "after_precommit_before_report" in message.split("valid names:")[1]


@pytest.mark.parametrize("text", ["mid_commit_handles@0", "mid_commit_handles@x", "a@"])
def test_bad_count_or_name_is_refused(text: str) -> None:
    with pytest.raises(FailpointConfigError):
        parse_failpoints(text)


def test_duplicate_is_refused() -> None:
    with pytest.raises(FailpointConfigError, match="twice"):
        parse_failpoints("mid_commit_handles,mid_commit_handles@2")


def test_fires_on_the_chosen_hit_only() -> None:
    messages: list[str] = []
    failpoints = _recorder(messages)
    failpoints.reach(Failpoint.AFTER_COMMIT_BEFORE_ACK)  # not armed
    failpoints.reach(Failpoint.MID_COMMIT_HANDLES)  # first hit: armed for the second
    assert messages == []
    with pytest.raises(_Exited):
        failpoints.reach(Failpoint.MID_COMMIT_HANDLES, detail="commit of p checkpoint 2")
    assert messages == [
        "failpoint mid_commit_handles hit (commit of p checkpoint 2): exiting with 137"
    ]
    with pytest.raises(_Exited):
        failpoints.reach(Failpoint.AFTER_PRECOMMIT_BEFORE_REPORT)


def test_from_env() -> None:
    armed = Failpoints.from_env({FAILPOINTS_ENV: "after_commit_before_ack"}).armed
    assert armed == (ArmedFailpoint(Failpoint.AFTER_COMMIT_BEFORE_ACK, 1),)
    assert Failpoints.from_env({}).armed == ()


def test_hold_is_parsed_and_needs_its_directory(tmp_path: Path) -> None:
    assert parse_failpoints("before_init_transactions@2:hold") == (
        ArmedFailpoint(Failpoint.BEFORE_INIT_TRANSACTIONS, 2, hold=True),
    )
    with pytest.raises(FailpointConfigError, match="':hold'"):
        parse_failpoints("before_init_transactions:pause")
    with pytest.raises(FailpointConfigError, match=FAILPOINT_HOLD_DIR_ENV):
        Failpoints.from_env({FAILPOINTS_ENV: "before_init_transactions:hold"})
    env = {FAILPOINTS_ENV: "before_init_transactions:hold", FAILPOINT_HOLD_DIR_ENV: str(tmp_path)}
    assert [a.describe() for a in Failpoints.from_env(env).armed] == [
        "before_init_transactions@1:hold"
    ]


def test_a_held_step_waits_for_its_release_file(tmp_path: Path) -> None:
    """The armed hit writes `<name>.held` and goes on only once `<name>.release` exists;
    the process does not exit."""
    exits: list[str] = []
    failpoints = Failpoints(
        parse_failpoints("before_init_transactions:hold"),
        hold_dir=tmp_path,
        exit_process=exits.append,
    )
    worker = threading.Thread(
        target=failpoints.reach,
        args=(Failpoint.BEFORE_INIT_TRANSACTIONS,),
        kwargs={"detail": "transactional.id x-0"},
        daemon=True,
    )
    worker.start()
    held = tmp_path / "before_init_transactions.held"
    wait_for("the step to hold", held.exists, timeout_s=10)
    worker.join(0.2)
    assert worker.is_alive(), "the step went on before its release"
    # The pid names the holder, for a test that kills it (a Spark worker's Python worker).
    assert held.read_text() == f"transactional.id x-0\npid {os.getpid()}\n"
    (tmp_path / "before_init_transactions.release").touch()
    worker.join(10)
    assert not worker.is_alive()
    assert exits == []


def test_held_hits_are_counted_across_processes(tmp_path: Path) -> None:
    """Spark runs write partitions in several Python workers: the N-th hit is the N-th
    over all of them, and a step held once is passed by every later hit."""
    (tmp_path / "before_init_transactions.release").touch()  # releases at once
    armed = parse_failpoints("before_init_transactions@2:hold")
    first, second = (Failpoints(armed, hold_dir=tmp_path) for _ in range(2))
    first.reach(Failpoint.BEFORE_INIT_TRANSACTIONS, detail="hit 1")
    assert not (tmp_path / "before_init_transactions.held").exists()
    second.reach(Failpoint.BEFORE_INIT_TRANSACTIONS, detail="hit 2")
    assert (tmp_path / "before_init_transactions.held").read_text() == f"hit 2\npid {os.getpid()}\n"
    first.reach(Failpoint.BEFORE_INIT_TRANSACTIONS, detail="hit 3")
    assert (tmp_path / "before_init_transactions.held").read_text() == f"hit 2\npid {os.getpid()}\n"
