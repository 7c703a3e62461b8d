"""Bad input on the REST facade: right status, Confluent error code, clear message, no change."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.processes import RegistryProcess

CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
GOOD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}


def snapshot(client: httpx.Client) -> dict[str, Any]:
    """Everything a user can see of the store's contents."""
    subjects = client.get("/subjects", params={"deleted": "true"}).json()
    versions = {
        s: client.get(f"/subjects/{s}/versions", params={"deleted": "true"}).json()
        for s in subjects
    }
    ids = []
    schema_id = 1
    while client.get(f"/schemas/ids/{schema_id}").status_code == 200:
        ids.append(schema_id)
        schema_id += 1
    return {
        "subjects": subjects,
        "versions": versions,
        "ids": ids,
        "config": client.get("/config").json(),
    }


def register_body(schema: Any) -> bytes:
    """A registration body whose schema is ``schema`` (text kept as is when a str)."""
    return json.dumps(
        {"schema": schema if isinstance(schema, str) else json.dumps(schema)}
    ).encode()


TEN_MB_SCHEMA = json.dumps({**GOOD, "doc": "x" * (10 * 1024 * 1024)})

# (id, method, path, body, status, error_code, words the message must contain)
CASES: list[tuple[str, str, str, bytes | None, int, int, str]] = [
    ("body-not-json", "POST", "/subjects/s/versions", b"{schema: nope", 400, 400, "not valid JSON"),
    ("body-not-object", "POST", "/subjects/s/versions", b"[1, 2]", 400, 400, "JSON object"),
    (
        "no-schema-field",
        "POST",
        "/subjects/s/versions",
        b'{"schemaa": "x"}',
        422,
        42201,
        "no 'schema' field",
    ),
    (
        "schema-not-json",
        "POST",
        "/subjects/s/versions",
        register_body("{not json"),
        422,
        42201,
        "not JSON",
    ),
    (
        "schema-not-avro",
        "POST",
        "/subjects/s/versions",
        register_body({"type": "record", "name": "U"}),
        422,
        42201,
        "not valid Avro",
    ),
    (
        "schema-bad-type",
        "POST",
        "/subjects/s/versions",
        register_body({"type": "integer"}),
        422,
        42201,
        "not valid Avro",
    ),
    (
        "default-wrong-type",
        "POST",
        "/subjects/s/versions",
        register_body({**GOOD, "fields": [{"name": "age", "type": "int", "default": "ten"}]}),
        422,
        42201,
        'default "ten" of field User.age does not match its type int',
    ),
    (
        "enum-default-not-symbol",
        "POST",
        "/subjects/s/versions",
        register_body({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}),
        422,
        42201,
        "not a valid member",
    ),
    (
        "ten-mb-schema",
        "POST",
        "/subjects/s/versions",
        register_body(TEN_MB_SCHEMA),
        422,
        42201,
        "raise --max-schema-bytes",
    ),
    (
        "unsupported-type",
        "POST",
        "/subjects/s/versions",
        b'{"schema": "{}", "schemaType": "THRIFT"}',
        422,
        42201,
        "serves AVRO, JSON, PROTOBUF",
    ),
    (
        "unknown-level",
        "PUT",
        "/config",
        b'{"compatibility": "SIDEWAYS"}',
        422,
        42203,
        "use one of NONE, BACKWARD",
    ),
    (
        "unknown-level-subject",
        "PUT",
        "/config/s",
        b'{"compatibility": "backwards"}',
        422,
        42203,
        "Invalid compatibility level",
    ),
    ("level-missing", "PUT", "/config", b'{"level": "FULL"}', 422, 42203, "compatibility"),
    (
        "unknown-subject",
        "GET",
        "/subjects/nope/versions",
        None,
        404,
        40401,
        "Subject 'nope' not found",
    ),
    ("unknown-subject-version", "GET", "/subjects/nope/versions/1", None, 404, 40401, "not found"),
    (
        "unknown-version",
        "GET",
        "/subjects/existing/versions/9",
        None,
        404,
        40402,
        "Version 9 not found",
    ),
    (
        "invalid-version",
        "GET",
        "/subjects/existing/versions/zero",
        None,
        422,
        42202,
        "not a valid version",
    ),
    ("invalid-version-zero", "GET", "/subjects/existing/versions/0", None, 422, 42202, "latest"),
    (
        "unknown-schema-id",
        "GET",
        "/schemas/ids/424242",
        None,
        404,
        40403,
        "Schema 424242 not found",
    ),
    (
        "lookup-unknown-schema",
        "POST",
        "/subjects/existing",
        register_body({**GOOD, "name": "Other"}),
        404,
        40403,
        "Schema not found",
    ),
    ("bad-boolean", "GET", "/subjects", None, 400, 400, "must be true or false"),
    (
        "permanent-before-soft",
        "DELETE",
        "/subjects/existing?permanent=true",
        None,
        404,
        40405,
        "not deleted first",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_input(
    module_registry: RegistryProcess,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    code: int,
    words: str,
) -> None:
    with httpx.Client(base_url=module_registry.url, timeout=60) as client:
        created = client.post(
            "/subjects/existing/versions", content=register_body(GOOD), headers=CT
        )
        assert created.status_code == 200, created.text
        before = snapshot(client)
        params = {"deleted": "maybe"} if words == "must be true or false" else None
        response = client.request(method, path, content=body, headers=CT, params=params)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
        error = response.json()
        assert error["error_code"] == code
        assert words in error["message"]
        assert "Traceback" not in error["message"]
        assert snapshot(client) == before


def test_query_booleans_are_case_insensitive(sqlite_registry: RegistryProcess) -> None:
    with httpx.Client(base_url=sqlite_registry.url, timeout=30) as client:
        client.post("/subjects/s/versions", content=register_body(GOOD), headers=CT)
        assert client.delete("/subjects/s").json() == [1]
        assert client.get("/subjects", params={"deleted": "False"}).json() == []
        assert client.get("/subjects", params={"deleted": "TRUE"}).json() == ["s"]
        assert client.get("/subjects/s/versions", params={"deleted": "True"}).json() == [1]
        again = client.delete("/subjects/s")
        assert again.status_code == 404 and again.json()["error_code"] == 40404
        assert client.delete("/subjects/s", params={"permanent": "True"}).json() == [1]
        missing_version = client.delete("/subjects/s/versions/1")
        assert missing_version.json()["error_code"] == 40401


def test_version_soft_delete_codes(sqlite_registry: RegistryProcess) -> None:
    with httpx.Client(base_url=sqlite_registry.url, timeout=30) as client:
        client.post("/subjects/s/versions", content=register_body(GOOD), headers=CT)
        not_soft = client.delete("/subjects/s/versions/1", params={"permanent": "true"})
        assert (not_soft.status_code, not_soft.json()["error_code"]) == (404, 40407)
        assert client.delete("/subjects/s/versions/1").json() == 1
        twice = client.delete("/subjects/s/versions/1")
        assert (twice.status_code, twice.json()["error_code"]) == (404, 40406)
        assert (
            client.get("/subjects/s/versions/1", params={"deleted": "true"}).json()["version"] == 1
        )
        assert client.get("/schemas/ids/1").status_code == 200
