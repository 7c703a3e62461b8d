"""Confluent Schema Registry's REST API on top of :class:`SchemaRegistry` (a plain ASGI app).

A hand-written router rather than a framework's: subject names are matched on the *raw*
path and percent-decoded segment by segment, so a subject containing ``/`` (sent as ``%2F``)
still routes; and the hot path (``GET /schemas/ids/{id}`` of a cached id) answers without
leaving the event loop. Everything that may touch the database runs in a worker thread.

Answers use Confluent's content type and, on error, its ``{"error_code", "message"}`` body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import anyio.to_thread

from lockgate.common.access import REGISTRY_READ, REGISTRY_WRITE, MethodAccess
from lockgate.common.auth import Authenticator, headers_authorization
from lockgate.schema_registry.errors import (
    BadRequestError,
    InvalidCompatibilityLevelError,
    InvalidSchemaError,
    InvalidVersionError,
    RegistryError,
    SubjectConfigNotFoundError,
)
from lockgate.schema_registry.formats import SCHEMA_TYPES
from lockgate.schema_registry.lookups import LookupApi, LookupCounter
from lockgate.schema_registry.model import (
    SCHEMA_TYPE_AVRO,
    SCHEMA_TYPE_PROTOBUF,
    RegisteredSchema,
    SchemaReference,
    SubjectVersion,
    parse_schema_id,
    parse_version,
)
from lockgate.schema_registry.references import ReferenceRequest, parse_reference
from lockgate.schema_registry.registry import SchemaRegistry

_LOG = logging.getLogger(__name__)

CONTENT_TYPE = b"application/vnd.schemaregistry.v1+json"
_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[dict[str, Any]]]
_Send = Callable[[dict[str, Any]], Awaitable[None]]
#: Room in a request body for the JSON around the schema text, in bytes.
_BODY_OVERHEAD = 64 * 1024


@dataclass(frozen=True)
class _Request:
    method: str
    segments: list[str]
    query: dict[str, str]
    body: bytes

    def flag(self, name: str) -> bool:
        """A boolean query parameter, case-insensitive (the Python client sends ``False``)."""
        raw = self.query.get(name)
        if raw is None or raw == "":
            return False
        lowered = raw.strip().lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise BadRequestError(f"Query parameter {name}={raw!r} must be true or false")

    def window(self, items: list[Any]) -> list[Any]:
        """``items`` cut by the ``offset`` and ``limit`` parameters (a negative limit: all)."""
        bounds = []
        for name, default in (("offset", 0), ("limit", -1)):
            raw = self.query.get(name, "")
            try:
                bounds.append(int(raw) if raw.strip() else default)
            except ValueError:
                raise BadRequestError(
                    f"Query parameter {name}={raw!r} must be an integer"
                ) from None
        offset, limit = bounds
        if offset < 0:
            raise BadRequestError(f"Query parameter offset={offset} must be 0 or more")
        return items[offset:] if limit < 0 else items[offset : offset + limit]

    def json_body(self) -> dict[str, Any]:
        """The body as a JSON object, or 400 saying what is wrong with it."""
        if not self.body.strip():
            raise BadRequestError("Request body is empty: send a JSON object")
        try:
            document = json.loads(self.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequestError(f"Request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise BadRequestError(
                "Request body is nested too deeply: send a flat JSON object such as"
                ' {"schema": "..."}'
            ) from None
        if not isinstance(document, dict):
            raise BadRequestError('Request body must be a JSON object such as {"schema": "..."}')
        return document


def _references_json(references: tuple[SchemaReference, ...]) -> list[dict[str, Any]]:
    return [{"name": r.name, "subject": r.subject, "version": r.version} for r in references]


def _version_json(version: SubjectVersion, text: _Formatted | None = None) -> dict[str, Any]:
    """A version's body, its text as ``format=`` asked (see :func:`_schema_json`)."""
    body: dict[str, Any] = {
        "subject": version.subject,
        "version": version.version,
        "id": version.schema_id,
        **_schema_json(version, text),
    }
    return body


@dataclass(frozen=True)
class _Formatted:
    """A schema's text in the form ``format=`` asked for."""

    text: str
    #: True when the references are inlined into the text (``format=resolved``), so the
    #: body lists none.
    inlined: bool


def _schema_json(
    schema: RegisteredSchema | SubjectVersion, text: _Formatted | None = None
) -> dict[str, Any]:
    """The body of ``GET /schemas/ids/{id}``; ``text`` replaces the stored text."""
    body: dict[str, Any] = {"schema": schema.schema_text if text is None else text.text}
    if schema.schema_type != SCHEMA_TYPE_AVRO:
        body["schemaType"] = schema.schema_type
    if schema.references and (text is None or not text.inlined):
        body["references"] = _references_json(schema.references)
    return body


def _raw_schema(schema: RegisteredSchema | SubjectVersion) -> Any:
    """The body of a ``.../schema`` route: the schema itself (a Protobuf schema as a string)."""
    if schema.schema_type == SCHEMA_TYPE_PROTOBUF:
        return schema.schema_text
    return json.loads(schema.schema_text)


def _parse_references(raw: Any) -> tuple[ReferenceRequest, ...]:
    """The body's ``references`` (absent or null: none); 42201 naming a malformed one."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidSchemaError(
            'Invalid schema: \'references\' must be a list of {"name", "subject", "version"}',
            field="references",
        )
    requests: list[ReferenceRequest] = []
    for position, item in enumerate(raw):
        entry = item if isinstance(item, dict) else {}
        requests.append(
            parse_reference(position, entry.get("name"), entry.get("subject"), entry.get("version"))
        )
    return tuple(requests)


def _schema_arguments(request: _Request) -> tuple[str, str | None, tuple[ReferenceRequest, ...]]:
    body = request.json_body()
    schema = body.get("schema")
    if schema is None:
        raise InvalidSchemaError(
            "Invalid schema: the request has no 'schema' field", field="schema"
        )
    if not isinstance(schema, str):
        raise InvalidSchemaError(
            "Invalid schema: 'schema' must be the schema as a JSON *string*", field="schema"
        )
    references = _parse_references(body.get("references"))
    schema_type = body.get("schemaType")
    return schema, None if schema_type is None else str(schema_type), references


def _imported_ids(request: _Request) -> tuple[int | None, int | None]:
    """The body's ``id`` and ``version`` (IMPORT mode); 42201 / 42202 when malformed."""
    body = request.json_body()
    schema_id, version = body.get("id"), body.get("version")
    if schema_id is not None and (
        isinstance(schema_id, bool) or not isinstance(schema_id, int) or schema_id < 1
    ):
        raise InvalidSchemaError(
            f"Invalid schema id {schema_id!r}: an imported id is an integer >= 1", field="id"
        )
    parsed_version = None if version is None else parse_version(version)
    if version is not None and parsed_version is None:
        raise InvalidVersionError(
            "An imported version is a number >= 1, not 'latest'", field="version"
        )
    return schema_id, parsed_version


def rest_access(method: str, segments: list[str]) -> MethodAccess:
    """The access row of a REST request: reads (GET, a lookup ``POST /subjects/{s}``, a
    compatibility check) as the gRPC reads of ``lockgate.common.access``, the rest as its
    writes."""
    lookup = method == "POST" and len(segments) == 2 and segments[0] == "subjects"
    check = method == "POST" and segments[:1] == ["compatibility"]
    if method in ("GET", "HEAD") or lookup or check:
        return REGISTRY_READ
    return REGISTRY_WRITE


class RestApp:
    """The ASGI application serving Confluent's REST API."""

    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        max_schema_bytes: int,
        lookups: LookupCounter | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        self._authenticator = authenticator
        self._registry = registry
        self._lookups = lookups or LookupCounter()
        self._max_body = max_schema_bytes * 2 + _BODY_OVERHEAD

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        path = raw_path.split(b"?", 1)[0].decode("latin-1")
        segments = [unquote(part) for part in path.strip("/").split("/")] if path.strip("/") else []
        method = scope["method"]
        if self._authenticator is not None:
            refusal = self._refusal(scope, method, segments)
            if refusal is not None:
                await self._send_json(send, *refusal)
                return
        # Hot path: a cached schema by id answers without a thread hop.
        if (
            method == "GET"
            and len(segments) == 3
            and segments[0] == "schemas"
            and segments[1] == "ids"
            and segments[2].isascii()
            and segments[2].isdigit()
            and len(segments[2]) <= 10
            and b"format=" not in scope.get("query_string", b"")
        ):
            cached = self._registry.cached_schema(int(segments[2]))
            if cached is not None:
                self._lookups.count(LookupApi.REST, hit=True)
                await self._send_json(send, 200, _schema_json(cached))
                return
        try:
            body = await self._read_body(receive) if method in ("POST", "PUT") else b""
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            request = _Request(method=method, segments=segments, query=query, body=body)
            status, payload = await anyio.to_thread.run_sync(self._dispatch, request)
        except RegistryError as exc:
            await self._send_json(
                send, exc.http_status, {"error_code": exc.error_code, "message": exc.message}
            )
            return
        except Exception:
            _LOG.exception("unexpected error serving %s %s", method, path)
            await self._send_json(
                send, 500, {"error_code": 50001, "message": "Internal server error"}
            )
            return
        await self._send_json(send, status, payload)

    def _refusal(
        self, scope: _Scope, method: str, segments: list[str]
    ) -> tuple[int, dict[str, Any]] | None:
        """401 or 403 (Confluent's JSON body) unless the caller may make this request."""
        assert self._authenticator is not None
        header = headers_authorization(scope.get("headers", ()))
        principal = None if header is None else self._authenticator.from_authorization(header)
        if principal is None:
            return 401, {
                "error_code": 40101,
                "message": "Unauthorized: send Authorization: Bearer <token>, or HTTP Basic"
                " with the principal as user and its token as password",
            }
        access = rest_access(method, segments)
        if not principal.roles & access.roles:
            roles = ", ".join(sorted(role.value for role in access.roles))
            return 403, {
                "error_code": 40301,
                "message": f"Forbidden: {principal.name} may not {method}"
                f" /{'/'.join(segments)}: it needs one of the roles {roles}",
            }
        return None

    async def _lifespan(self, receive: _Receive, send: _Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _read_body(self, receive: _Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise InvalidSchemaError(
                    f"Invalid schema: the request body is larger than {self._max_body} bytes;"
                    f" a schema may be at most {(self._max_body - _BODY_OVERHEAD) // 2} bytes"
                    " (raise --max-schema-bytes)",
                    field="schema",
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    async def _send_json(send: _Send, status: int, payload: Any) -> None:
        body = json.dumps(payload, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", CONTENT_TYPE),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    # --- routing (runs in a worker thread) ----------------------------------------------------

    def _dispatch(self, request: _Request) -> tuple[int, Any]:
        segments, method = request.segments, request.method
        head = segments[0] if segments else ""
        handler = {
            "subjects": self._subjects,
            "schemas": self._schemas,
            "compatibility": self._compatibility,
            "config": self._config,
            "mode": self._mode,
        }.get(head)
        if not segments and method == "GET":
            return 200, {}
        if handler is None:
            return 404, {
                "error_code": 404,
                "message": f"HTTP 404 Not Found: no endpoint /{'/'.join(segments)}",
            }
        return handler(request)

    @staticmethod
    def _no_route(request: _Request) -> tuple[int, Any]:
        path = "/" + "/".join(request.segments)
        return 405 if request.segments else 404, {
            "error_code": 405,
            "message": f"HTTP 405 Method Not Allowed: {request.method} {path}",
        }

    def _subjects(self, request: _Request) -> tuple[int, Any]:
        registry, segments, method = self._registry, request.segments, request.method
        deleted = request.flag("deleted")
        # Confluent's server spells it deletedOnly; its Python client sends deleted_only.
        deleted_only = request.flag("deletedOnly") or request.flag("deleted_only")
        if len(segments) == 1 and method == "GET":
            subjects = registry.list_subjects(
                include_deleted=deleted,
                deleted_only=deleted_only,
                prefix=request.query.get("subjectPrefix", ""),
            )
            return 200, request.window(list(subjects))
        if len(segments) < 2:
            return self._no_route(request)
        subject = segments[1]
        if len(segments) == 2:
            if method == "POST":
                schema, schema_type, references = _schema_arguments(request)
                found = registry.lookup(
                    subject,
                    schema,
                    schema_type=schema_type,
                    references=references,
                    include_deleted=deleted,
                )
                return 200, _version_json(found)
            if method == "DELETE":
                return 200, registry.delete_subject(subject, permanent=request.flag("permanent"))
            return self._no_route(request)
        if segments[2] != "versions":
            return self._no_route(request)
        if len(segments) == 3:
            if method == "GET":
                listed = registry.list_versions(
                    subject, include_deleted=deleted, deleted_only=deleted_only
                )
                return 200, request.window([v.version for v in listed])
            if method == "POST":
                schema, schema_type, references = _schema_arguments(request)
                schema_id, imported_version = _imported_ids(request)
                result = registry.register(
                    subject,
                    schema,
                    schema_type=schema_type,
                    references=references,
                    schema_id=schema_id,
                    version=imported_version,
                )
                return 200, {"id": result.schema_id}
            return self._no_route(request)
        version = segments[3]
        if len(segments) == 4:
            if method == "GET":
                found = registry.get_version(subject, version, include_deleted=deleted)
                return 200, _version_json(found, self._resolved(request, found))
            if method == "DELETE":
                return 200, registry.delete_version(
                    subject, version, permanent=request.flag("permanent")
                )
            return self._no_route(request)
        if len(segments) == 5 and method == "GET":
            if segments[4] == "schema":
                found = registry.get_version(subject, version, include_deleted=deleted)
                return 200, _raw_schema(found)
            if segments[4] == "referencedby":
                return 200, registry.referenced_by(subject, version)
        return self._no_route(request)

    def _schemas(self, request: _Request) -> tuple[int, Any]:
        registry, segments = self._registry, request.segments
        if request.method != "GET":
            return self._no_route(request)
        if segments == ["schemas", "types"]:
            return 200, list(SCHEMA_TYPES)
        if segments == ["schemas"]:
            schemas = registry.list_schemas(
                prefix=request.query.get("subjectPrefix", ""),
                include_deleted=request.flag("deleted"),
                latest_only=request.flag("latestOnly"),
            )
            return 200, request.window([_version_json(version) for version in schemas])
        if len(segments) < 3 or segments[1] != "ids":
            return self._no_route(request)
        schema_id = parse_schema_id(segments[2])
        if len(segments) == 3 or segments[3] == "schema":
            self._lookups.count(LookupApi.REST, hit=registry.cached_schema(schema_id) is not None)
            found_schema = registry.get_schema(schema_id)
            if len(segments) == 3:
                return 200, _schema_json(found_schema, self._resolved(request, found_schema))
            return 200, _raw_schema(found_schema)
        tail = segments[3]
        deleted = request.flag("deleted")
        if tail == "versions":
            usages = registry.schema_usages(schema_id, include_deleted=deleted)
            return 200, [{"subject": subject, "version": version} for subject, version in usages]
        if tail == "subjects":
            usages = registry.schema_usages(schema_id, include_deleted=deleted)
            return 200, sorted({subject for subject, _ in usages})
        return self._no_route(request)

    def _resolved(
        self, request: _Request, schema: RegisteredSchema | SubjectVersion
    ) -> _Formatted | None:
        """The text as ``format=`` asks: ``resolved`` inlines the references (Avro),
        ``serialized`` is a Protobuf schema's base64 ``FileDescriptorProto``."""
        wanted = request.query.get("format", "").strip().lower()
        if wanted == "resolved":
            return _Formatted(self._registry.resolved_text(schema), inlined=True)
        if wanted == "serialized":
            return _Formatted(self._registry.serialized_text(schema), inlined=False)
        return None

    def _compatibility(self, request: _Request) -> tuple[int, Any]:
        segments = request.segments
        if request.method != "POST" or len(segments) not in (4, 5) or segments[1] != "subjects":
            return self._no_route(request)
        if segments[3] != "versions":
            return self._no_route(request)
        schema, schema_type, references = _schema_arguments(request)
        version = segments[4] if len(segments) == 5 else None
        report = self._registry.check(
            segments[2], schema, version=version, schema_type=schema_type, references=references
        )
        body: dict[str, Any] = {"is_compatible": report.compatible}
        if request.flag("verbose") or not report.compatible:
            body["messages"] = list(report.reasons)
        return 200, body

    def _config(self, request: _Request) -> tuple[int, Any]:
        segments, method = request.segments, request.method
        if len(segments) > 2:
            return self._no_route(request)
        subject = segments[1] if len(segments) == 2 else None
        if method == "GET":
            level = self._registry.get_config(
                subject, default_to_global=request.flag("defaultToGlobal")
            )
            if level is None:
                raise SubjectConfigNotFoundError(
                    f"Subject '{subject}' does not have subject-level compatibility configured",
                    field="subject",
                )
            return 200, {"compatibilityLevel": level.value}
        if method == "PUT":
            body = request.json_body()
            level_text = body.get("compatibility", body.get("compatibilityLevel"))
            if not isinstance(level_text, str):
                raise InvalidCompatibilityLevelError(
                    'Invalid compatibility level: send {"compatibility": "BACKWARD"} (or'
                    " another level name)",
                    field="compatibility",
                )
            return 200, {"compatibility": self._registry.set_config(subject, level_text).value}
        if method == "DELETE":
            return 200, {"compatibilityLevel": self._registry.delete_config(subject).value}
        return self._no_route(request)

    def _mode(self, request: _Request) -> tuple[int, Any]:
        segments, method = request.segments, request.method
        if len(segments) > 2:
            return self._no_route(request)
        subject = segments[1] if len(segments) == 2 else None
        if method == "GET":
            mode = self._registry.get_mode(
                subject, default_to_global=request.flag("defaultToGlobal")
            )
            return 200, {"mode": mode.value}
        if method == "PUT":
            wanted = request.json_body().get("mode")
            new_mode = self._registry.set_mode(subject, wanted, force=request.flag("force"))
            return 200, {"mode": new_mode.value}
        if method == "DELETE":
            return 200, {"mode": self._registry.delete_mode(subject).value}
        return self._no_route(request)
