"""The REST facade never answers 500: random methods, paths, ids, query flags and bodies
against a real registry process, for a bounded number of examples, and every error body is
Confluent's `{"error_code": int, "message": str}`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.processes import RegistryProcess

CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
GOOD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["1", "²", "٣", "1e3", "0x10", " 1", "1_0", "latest", "-1", "", "9" * 400]),
)
_SUBJECTS = st.one_of(st.just("existing"), _TEXT)

# Every route of the facade, with its method: most examples follow one with fuzzed values,
# so they get past routing into the code that parses them.
_ROUTES = [
    ("GET", "/subjects"),
    ("POST", "/subjects/{s}"),
    ("DELETE", "/subjects/{s}"),
    ("GET", "/subjects/{s}/versions"),
    ("POST", "/subjects/{s}/versions"),
    ("GET", "/subjects/{s}/versions/{v}"),
    ("DELETE", "/subjects/{s}/versions/{v}"),
    ("GET", "/subjects/{s}/versions/{v}/schema"),
    ("GET", "/subjects/{s}/versions/{v}/referencedby"),
    ("GET", "/schemas/ids/{v}"),
    ("GET", "/schemas/ids/{v}/schema"),
    ("GET", "/schemas/ids/{v}/versions"),
    ("GET", "/schemas/ids/{v}/subjects"),
    ("GET", "/schemas/types"),
    ("POST", "/compatibility/subjects/{s}/versions"),
    ("POST", "/compatibility/subjects/{s}/versions/{v}"),
    ("GET", "/config"),
    ("PUT", "/config"),
    ("GET", "/config/{s}"),
    ("PUT", "/config/{s}"),
    ("DELETE", "/config/{s}"),
    ("GET", "/mode"),
]
_METHODS = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str]:
    """A method and a path: a real route with fuzzed subject, version and id values, or,
    one time in five, a random method on random segments."""
    if draw(st.integers(0, 4)) == 0:
        segment = st.one_of(_TEXT, _NUMBERS).filter(bool)  # "//" is no path a client sends
        segments = draw(st.lists(segment, max_size=5))
        return draw(_METHODS), "/" + "/".join(quote(x, safe="") for x in segments)
    method, template = draw(st.sampled_from(_ROUTES))
    path = template.replace("{s}", quote(draw(_SUBJECTS), safe="")).replace(
        "{v}", quote(draw(_NUMBERS), safe="")
    )
    return method, path


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


def _deep(depth: int) -> bytes:
    return b'{"schema": ' + b"[" * depth + b"]" * depth + b"}"


_BODIES = st.one_of(
    st.none(),
    st.binary(max_size=64),
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"schema": st.one_of(_TEXT, _JSON, st.just(json.dumps(GOOD)))},
        optional={"schemaType": _TEXT, "references": _JSON, "compatibility": _TEXT},
    ).map(lambda v: json.dumps(v).encode()),
    st.integers(min_value=1_000, max_value=60_000).map(_deep),
    st.just(json.dumps({"schema": "[" * 50_000 + "]" * 50_000}).encode()),
)
_QUERY = st.dictionaries(
    st.sampled_from(["deleted", "permanent", "verbose", "defaultToGlobal", "x"]),
    st.one_of(_TEXT, st.sampled_from(["true", "false"])),
    max_size=2,
)


@pytest.fixture(scope="module")
def client(module_registry: RegistryProcess) -> Iterator[httpx.Client]:
    """A client of the module's registry, with one subject registered."""
    with httpx.Client(base_url=module_registry.url, timeout=60) as http:
        created = http.post(
            "/subjects/existing/versions", content=json.dumps({"schema": json.dumps(GOOD)})
        )
        assert created.status_code == 200, created.text
        yield http


def assert_confluent_error(response: httpx.Response) -> None:
    body: Any = response.json()
    assert isinstance(body, dict), body
    assert set(body) == {"error_code", "message"}, body
    assert isinstance(body["error_code"], int) and isinstance(body["message"], str), body
    assert "Traceback" not in body["message"]


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests(), query=_QUERY, body=_BODIES)
def test_no_request_gets_a_500(
    client: httpx.Client, request: tuple[str, str], query: dict[str, str], body: bytes | None
) -> None:
    method, path = request
    response = client.request(method, path, params=query, content=body, headers=CT)
    assert response.status_code < 500, (method, path, query, body and body[:200], response.text)
    if response.status_code >= 400:
        assert_confluent_error(response)


@pytest.mark.parametrize(
    "schema_id", ["abc", "%C2%B2", "0", "-1", "2147483648", "99999999999999999999999"]
)
@pytest.mark.parametrize("tail", ["", "/schema", "/versions", "/subjects"])
def test_a_schema_id_that_names_no_schema_is_404_40403(
    client: httpx.Client, schema_id: str, tail: str
) -> None:
    response = client.get(f"/schemas/ids/{schema_id}{tail}")
    assert response.status_code == 404, response.text
    assert_confluent_error(response)
    assert response.json()["error_code"] == 40403
    assert "integer from 1 to 2147483647" in response.json()["message"]


def test_a_body_nested_50000_deep_is_a_400_json_error(client: httpx.Client) -> None:
    response = client.post("/subjects/s/versions", content=_deep(50_000), headers=CT)
    assert response.status_code == 400, response.text
    assert_confluent_error(response)
    assert "nested too deeply" in response.json()["message"]
    assert client.get("/subjects").status_code == 200  # still serving


def test_a_body_over_the_size_limit_is_a_4xx_json_error(client: httpx.Client) -> None:
    body = b'{"schema": "' + b"x" * (8 * 1024 * 1024) + b'"}'
    for path in ("/subjects/s/versions", "/config"):
        response = client.request(
            "POST" if "subjects" in path else "PUT", path, content=body, headers=CT
        )
        assert 400 <= response.status_code < 500, response.text
        assert_confluent_error(response)
        assert "larger than" in response.json()["message"]
