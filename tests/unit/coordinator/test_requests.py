"""What a request_id seen before means (`domain/requests.py`) and the request hash."""

from __future__ import annotations

import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.coordinator.api.idempotency import request_hash
from lockgate.coordinator.domain.requests import RecordedRequest, check_request_id, replay
from lockgate.v1 import common_pb2, coordinator_pb2

RECORDED = RecordedRequest(
    request_id="r1",
    method="CreatePipeline",
    request_hash="h1",
    response=b"answer",
    created_at_ms=0,
)


def test_a_retry_of_the_same_request_gets_the_recorded_answer() -> None:
    assert replay(None, method="CreatePipeline", request_hash="h1") is None
    assert replay(RECORDED, method="CreatePipeline", request_hash="h1") == b"answer"


@pytest.mark.parametrize(
    ("method", "digest", "says"),
    [
        ("PausePipeline", "h1", "already used for a CreatePipeline call"),
        ("CreatePipeline", "h2", "different CreatePipeline request"),
    ],
)
def test_the_same_id_with_another_call_is_refused_naming_request_id(
    method: str, digest: str, says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says) as refused:
        replay(RECORDED, method=method, request_hash=digest)
    assert [v.field for v in refused.value.violations] == ["request_id"]


def test_a_request_id_longer_than_the_column_is_refused() -> None:
    check_request_id("x" * 255)
    with pytest.raises(InvalidArgument, match="send a UUID") as refused:
        check_request_id("x" * 256)
    assert [v.field for v in refused.value.violations] == ["request_id"]


def test_the_hash_ignores_the_request_id_and_sees_everything_else() -> None:
    def create(request_id: str, tasks_max: int) -> coordinator_pb2.CreatePipelineRequest:
        return coordinator_pb2.CreatePipelineRequest(
            request_id=request_id, spec=common_pb2.PipelineSpec(name="p", tasks_max=tasks_max)
        )

    first = create("a", 2)
    assert request_hash(first) == request_hash(create("b", 2))
    assert request_hash(first) != request_hash(create("a", 3))
    assert first.request_id == "a", "the caller's request is left as it was"
