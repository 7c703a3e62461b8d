"""A partition's resume offset outside its log is a task error naming it, never a skip."""

from __future__ import annotations

import pytest

from lockgate.executor.dataplane.spark.offsets import check_in_log
from lockgate.executor.errors import OffsetOutOfRangeError
from lockgate.executor.runtime.tasks import task_fails_on


def test_offsets_inside_the_log_pass() -> None:
    check_in_log("orders", 2, start=5, low=5, stable=9)
    check_in_log("orders", 2, start=9, low=5, stable=9)


def test_records_deleted_by_retention_name_the_partition_and_the_offsets() -> None:
    with pytest.raises(OffsetOutOfRangeError) as raised:
        check_in_log("orders", 2, start=5, low=40, stable=90)
    message = raised.value.message
    assert "orders[2]" in message and "records 5..39 were deleted" in message
    assert "--set orders:2=OFFSET" in message
    assert task_fails_on(raised.value)


def test_a_resume_offset_past_the_log_end_is_named() -> None:
    with pytest.raises(
        OffsetOutOfRangeError, match=r"orders\[0\].*offset 120, past the log end \(90\)"
    ):
        check_in_log("orders", 0, start=120, low=0, stable=90)
