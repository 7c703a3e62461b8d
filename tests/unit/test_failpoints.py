"""Parsing and firing of LOCKGATE_FAILPOINTS."""

from __future__ import annotations

import pytest

from lockgate.common.failpoints import (
    FAILPOINTS_ENV,
    ArmedFailpoint,
    Failpoint,
    FailpointConfigError,
    Failpoints,
    parse_failpoints,
)


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
