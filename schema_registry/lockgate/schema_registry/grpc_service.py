"""gRPC servicer of ``lockgate.v1.SchemaRegistryService``: convert, delegate, convert back.

Registry errors become ``lockgate.common.errors`` here (one function), and the common
error-mapping interceptor turns those into status codes with ``google.rpc`` details; the
Confluent error code travels as ``ErrorInfo`` metadata ``confluent_error_code``.
"""

from __future__ import annotations

import base64
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from lockgate.common import errors as common_errors
from lockgate.schema_registry.errors import (
    IncompatibleSchemaError,
    InvalidModeError,
    RegistryError,
)
from lockgate.schema_registry.lookups import LookupApi, LookupCounter
from lockgate.schema_registry.model import (
    SCHEMA_TYPE_AVRO,
    SCHEMA_TYPE_JSON,
    SCHEMA_TYPE_PROTOBUF,
    CompatibilityLevel,
    Mode,
    SchemaReference,
    SubjectVersion,
)
from lockgate.schema_registry.references import ReferenceRequest, parse_reference
from lockgate.schema_registry.registry import SchemaRegistry
from lockgate.v1 import schema_registry_pb2 as pb
from lockgate.v1 import schema_registry_pb2_grpc as pb_grpc

SERVICE_FULL_NAME = "lockgate.v1.SchemaRegistryService"
#: Largest page a List RPC returns.
MAX_PAGE_SIZE = 1000
#: Answers to mutating calls remembered for request_id retries, per process.
MAX_REMEMBERED_REQUESTS = 10_000
#: GetSchema answers kept ready to send.
MAX_CACHED_RESPONSES = 100_000

_LEVEL_TO_PB = {
    level: pb.CompatibilityLevel.Value(f"COMPATIBILITY_LEVEL_{level.value}")
    for level in CompatibilityLevel
}
_PB_TO_LEVEL = {value: level for level, value in _LEVEL_TO_PB.items()}
_MODE_TO_PB = {mode: pb.Mode.Value(f"MODE_{mode.value}") for mode in Mode}
_PB_TO_MODE = {value: mode for mode, value in _MODE_TO_PB.items()}
_SCHEMA_TYPE_TO_PB = {
    SCHEMA_TYPE_AVRO: pb.SCHEMA_TYPE_AVRO,
    SCHEMA_TYPE_JSON: pb.SCHEMA_TYPE_JSON,
    SCHEMA_TYPE_PROTOBUF: pb.SCHEMA_TYPE_PROTOBUF,
}
_PB_TO_SCHEMA_TYPE = {value: name for name, value in _SCHEMA_TYPE_TO_PB.items()}
_Response = TypeVar("_Response", bound=Message)


def _reason_of(error: RegistryError) -> str:
    name = type(error).__name__.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def to_common_error(error: RegistryError) -> common_errors.LockgateError:
    """The ``lockgate.common.errors`` equivalent of a registry error (same message)."""
    metadata = {"confluent_error_code": str(error.error_code)}
    reason = _reason_of(error)
    if error.status_name == "INVALID_ARGUMENT":
        violations = [common_errors.FieldViolation(error.field or "request", error.message)]
        return common_errors.InvalidArgument(
            error.message, violations=violations, reason=reason, metadata=metadata
        )
    if error.status_name == "NOT_FOUND":
        return common_errors.NotFound(
            error.message, resource_type=error.field, reason=reason, metadata=metadata
        )
    if error.status_name == "FAILED_PRECONDITION":
        incompatible = isinstance(error, IncompatibleSchemaError)
        reasons = error.reasons if isinstance(error, IncompatibleSchemaError) else (error.message,)
        kind = "SCHEMA_COMPATIBILITY" if incompatible else reason
        precondition = [
            common_errors.PreconditionViolation(kind, error.field, text) for text in reasons
        ]
        return common_errors.FailedPrecondition(
            error.message, violations=precondition, reason=reason, metadata=metadata
        )
    if error.status_name == "UNAVAILABLE":
        return common_errors.Unavailable(error.message, reason=reason, metadata=metadata)
    return common_errors.Internal(error.message, reason=reason, metadata=metadata)


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def _translating(handler: _Handler) -> _Handler:
    """Re-raise registry errors as common errors for the error-mapping interceptor."""

    @wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except RegistryError as exc:
            raise to_common_error(exc) from None

    return wrapper  # type: ignore[return-value]


def _page(items: Sequence[Any], page_size: int, page_token: str) -> tuple[Sequence[Any], str]:
    if page_size < 0:
        raise common_errors.InvalidArgument.for_field(
            "page_size", f"{page_size} is negative; use 0 (default) to {MAX_PAGE_SIZE}"
        )
    size = min(page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
    start = _page_start(page_token)
    end = start + size
    token = base64.urlsafe_b64encode(f"o:{end}".encode()).decode() if end < len(items) else ""
    return items[start:end], token


_PAGE_TOKEN = re.compile(r"^o:([0-9]{1,18})$")


def _page_start(page_token: str) -> int:
    """Where the page a token names starts (0 without one); InvalidArgument for any token
    this service does not issue (`base64("o:<offset>")`)."""
    if not page_token:
        return 0
    try:
        decoded = base64.urlsafe_b64decode(page_token.encode("ascii")).decode("ascii")
    except (ValueError, UnicodeError):  # binascii.Error is a ValueError
        decoded = ""
    match = _PAGE_TOKEN.match(decoded)
    if match is None:
        raise common_errors.InvalidArgument.for_field(
            "page_token", "is not a token this service returned; pass next_page_token as is"
        )
    return int(match[1])


def _references_pb(references: Sequence[SchemaReference]) -> list[pb.SchemaReference]:
    return [
        pb.SchemaReference(name=ref.name, subject=ref.subject, version=ref.version)
        for ref in references
    ]


def _reference_requests(references: Sequence[pb.SchemaReference]) -> tuple[ReferenceRequest, ...]:
    return tuple(
        parse_reference(position, ref.name, ref.subject, ref.version)
        for position, ref in enumerate(references)
    )


def _subject_version(version: SubjectVersion) -> pb.SubjectVersion:
    return pb.SubjectVersion(
        subject=version.subject,
        version=version.version,
        schema_id=version.schema_id,
        schema_type=_SCHEMA_TYPE_TO_PB.get(version.schema_type, pb.SCHEMA_TYPE_UNSPECIFIED),
        schema=version.schema_text,
        deleted=version.deleted,
        references=_references_pb(version.references),
    )


def _schema_type(value: pb.SchemaType.ValueType) -> str:
    """The registry's type name of a SchemaType value (UNSPECIFIED means AVRO)."""
    if value == pb.SCHEMA_TYPE_UNSPECIFIED:
        return SCHEMA_TYPE_AVRO
    return _PB_TO_SCHEMA_TYPE.get(value, f"type {value}")


class SchemaRegistryServicer(pb_grpc.SchemaRegistryServiceServicer):
    """Translates RPCs to :class:`SchemaRegistry` calls."""

    def __init__(self, registry: SchemaRegistry, lookups: LookupCounter | None = None) -> None:
        self._registry = registry
        self._lookups = lookups or LookupCounter()
        self._answers: OrderedDict[tuple[str, str], Message] = OrderedDict()
        self._answers_lock = threading.Lock()
        self._schema_responses: dict[int, pb.GetSchemaResponse] = {}

    def _once(self, method: str, request_id: str, produce: Callable[[], _Response]) -> _Response:
        """Run a mutating call once per request_id (retries get the first answer)."""
        if not request_id:
            return produce()
        key = (method, request_id)
        with self._answers_lock:
            known = self._answers.get(key)
        if known is not None:
            return known  # type: ignore[return-value]
        answer = produce()
        with self._answers_lock:
            self._answers[key] = answer
            while len(self._answers) > MAX_REMEMBERED_REQUESTS:
                self._answers.popitem(last=False)
        return answer

    @_translating
    def GetSchema(
        self, request: pb.GetSchemaRequest, context: grpc.ServicerContext
    ) -> pb.GetSchemaResponse:
        """See the proto."""
        cached = self._schema_responses.get(request.schema_id)
        if cached is not None:
            self._lookups.count(LookupApi.GRPC, hit=True)
            return cached
        hit = self._registry.cached_schema(request.schema_id) is not None
        self._lookups.count(LookupApi.GRPC, hit=hit)
        found = self._registry.get_schema(request.schema_id)
        response = pb.GetSchemaResponse(
            schema=pb.Schema(
                schema_id=found.schema_id,
                schema_type=_SCHEMA_TYPE_TO_PB.get(found.schema_type, pb.SCHEMA_TYPE_UNSPECIFIED),
                schema=found.schema_text,
                references=_references_pb(found.references),
            )
        )
        # Ids never change meaning, so the answer can be reused as is (bounded like the
        # registry's own cache).
        if len(self._schema_responses) >= MAX_CACHED_RESPONSES:
            self._schema_responses.clear()
        self._schema_responses[request.schema_id] = response
        return response

    @_translating
    def ListSchemaVersions(
        self, request: pb.ListSchemaVersionsRequest, context: grpc.ServicerContext
    ) -> pb.ListSchemaVersionsResponse:
        """See the proto."""
        usages = self._registry.schema_usages(
            request.schema_id, include_deleted=request.include_deleted
        )
        page, token = _page(usages, request.page_size, request.page_token)
        return pb.ListSchemaVersionsResponse(
            versions=[pb.SubjectVersionRef(subject=s, version=v) for s, v in page],
            next_page_token=token,
        )

    @_translating
    def RegisterSchema(
        self, request: pb.RegisterSchemaRequest, context: grpc.ServicerContext
    ) -> pb.RegisterSchemaResponse:
        """See the proto."""

        def produce() -> pb.RegisterSchemaResponse:
            result = self._registry.register(
                request.subject,
                request.schema,
                schema_type=_schema_type(request.schema_type),
                references=_reference_requests(request.references),
                schema_id=request.schema_id or None,
                version=request.version or None,
            )
            return pb.RegisterSchemaResponse(
                schema_id=result.schema_id, version=result.version, created=result.created
            )

        return self._once("RegisterSchema", request.request_id, produce)

    @_translating
    def LookupSchema(
        self, request: pb.LookupSchemaRequest, context: grpc.ServicerContext
    ) -> pb.LookupSchemaResponse:
        """See the proto."""
        found = self._registry.lookup(
            request.subject,
            request.schema,
            schema_type=_schema_type(request.schema_type),
            references=_reference_requests(request.references),
            include_deleted=request.include_deleted,
        )
        return pb.LookupSchemaResponse(subject_version=_subject_version(found))

    @_translating
    def ListSubjects(
        self, request: pb.ListSubjectsRequest, context: grpc.ServicerContext
    ) -> pb.ListSubjectsResponse:
        """See the proto."""
        subjects = self._registry.list_subjects(
            include_deleted=request.include_deleted,
            deleted_only=request.deleted_only,
            prefix=request.subject_prefix,
        )
        page, token = _page(subjects, request.page_size, request.page_token)
        return pb.ListSubjectsResponse(subjects=list(page), next_page_token=token)

    @_translating
    def ListSubjectVersions(
        self, request: pb.ListSubjectVersionsRequest, context: grpc.ServicerContext
    ) -> pb.ListSubjectVersionsResponse:
        """See the proto."""
        versions = self._registry.list_versions(
            request.subject,
            include_deleted=request.include_deleted,
            deleted_only=request.deleted_only,
        )
        page, token = _page(versions, request.page_size, request.page_token)
        return pb.ListSubjectVersionsResponse(
            versions=[_subject_version(v) for v in page], next_page_token=token
        )

    @_translating
    def GetSubjectVersion(
        self, request: pb.GetSubjectVersionRequest, context: grpc.ServicerContext
    ) -> pb.GetSubjectVersionResponse:
        """See the proto."""
        version: str | int = request.version if request.version else "latest"
        found = self._registry.get_version(
            request.subject, version, include_deleted=request.include_deleted
        )
        return pb.GetSubjectVersionResponse(subject_version=_subject_version(found))

    @_translating
    def CheckCompatibility(
        self, request: pb.CheckCompatibilityRequest, context: grpc.ServicerContext
    ) -> pb.CheckCompatibilityResponse:
        """See the proto."""
        report = self._registry.check(
            request.subject,
            request.schema,
            version=request.version or None,
            schema_type=_schema_type(request.schema_type),
            references=_reference_requests(request.references),
        )
        return pb.CheckCompatibilityResponse(
            compatible=report.compatible,
            reasons=list(report.reasons),
            level=_LEVEL_TO_PB[report.level],
        )

    @_translating
    def GetCompatibilityConfig(
        self, request: pb.GetCompatibilityConfigRequest, context: grpc.ServicerContext
    ) -> pb.GetCompatibilityConfigResponse:
        """See the proto."""
        subject = request.subject or None
        level = self._registry.get_config(subject, default_to_global=request.default_to_global)
        if level is None:
            raise common_errors.NotFound(
                f"Subject '{subject}' does not have subject-level compatibility configured;"
                " set default_to_global to read the global level",
                resource_type="subject",
                resource_name=str(subject),
                reason="SUBJECT_CONFIG_NOT_FOUND",
                metadata={"confluent_error_code": "40408"},
            )
        return pb.GetCompatibilityConfigResponse(level=_LEVEL_TO_PB[level])

    @_translating
    def UpdateCompatibilityConfig(
        self, request: pb.UpdateCompatibilityConfigRequest, context: grpc.ServicerContext
    ) -> pb.UpdateCompatibilityConfigResponse:
        """See the proto."""
        level = _PB_TO_LEVEL.get(request.level)
        if level is None:
            names = ", ".join(
                name
                for name in pb.CompatibilityLevel.keys()  # noqa: SIM118 (protobuf enum wrapper)
                if not name.endswith("UNSPECIFIED")
            )
            raise common_errors.InvalidArgument(
                f"level: {request.level} is not a compatibility level; use one of {names}",
                violations=[common_errors.FieldViolation("level", f"use one of {names}")],
                reason="INVALID_COMPATIBILITY_LEVEL",
                metadata={"confluent_error_code": "42203"},
            )

        def produce() -> pb.UpdateCompatibilityConfigResponse:
            new_level = self._registry.set_config(request.subject or None, level.value)
            return pb.UpdateCompatibilityConfigResponse(level=_LEVEL_TO_PB[new_level])

        return self._once("UpdateCompatibilityConfig", request.request_id, produce)

    @_translating
    def DeleteCompatibilityConfig(
        self, request: pb.DeleteCompatibilityConfigRequest, context: grpc.ServicerContext
    ) -> pb.DeleteCompatibilityConfigResponse:
        """See the proto."""

        def produce() -> pb.DeleteCompatibilityConfigResponse:
            old = self._registry.delete_config(request.subject or None)
            return pb.DeleteCompatibilityConfigResponse(previous_level=_LEVEL_TO_PB[old])

        return self._once("DeleteCompatibilityConfig", request.request_id, produce)

    @_translating
    def DeleteSubject(
        self, request: pb.DeleteSubjectRequest, context: grpc.ServicerContext
    ) -> pb.DeleteSubjectResponse:
        """See the proto."""

        def produce() -> pb.DeleteSubjectResponse:
            versions = self._registry.delete_subject(request.subject, permanent=request.permanent)
            return pb.DeleteSubjectResponse(versions=list(versions))

        return self._once("DeleteSubject", request.request_id, produce)

    @_translating
    def DeleteSubjectVersion(
        self, request: pb.DeleteSubjectVersionRequest, context: grpc.ServicerContext
    ) -> pb.DeleteSubjectVersionResponse:
        """See the proto."""

        def produce() -> pb.DeleteSubjectVersionResponse:
            version: str | int = request.version if request.version else "latest"
            deleted = self._registry.delete_version(
                request.subject, version, permanent=request.permanent
            )
            return pb.DeleteSubjectVersionResponse(version=deleted)

        return self._once("DeleteSubjectVersion", request.request_id, produce)

    @_translating
    def ListReferencingSchemas(
        self, request: pb.ListReferencingSchemasRequest, context: grpc.ServicerContext
    ) -> pb.ListReferencingSchemasResponse:
        """See the proto."""
        version: str | int = request.version if request.version else "latest"
        schema_ids = self._registry.referenced_by(request.subject, version)
        page, token = _page(schema_ids, request.page_size, request.page_token)
        return pb.ListReferencingSchemasResponse(schema_ids=list(page), next_page_token=token)

    @_translating
    def ListSchemas(
        self, request: pb.ListSchemasRequest, context: grpc.ServicerContext
    ) -> pb.ListSchemasResponse:
        """See the proto."""
        versions = self._registry.list_schemas(
            prefix=request.subject_prefix,
            include_deleted=request.include_deleted,
            latest_only=request.latest_only,
        )
        page, token = _page(versions, request.page_size, request.page_token)
        return pb.ListSchemasResponse(
            versions=[_subject_version(v) for v in page], next_page_token=token
        )

    @_translating
    def GetMode(
        self, request: pb.GetModeRequest, context: grpc.ServicerContext
    ) -> pb.GetModeResponse:
        """See the proto."""
        mode = self._registry.get_mode(
            request.subject or None, default_to_global=request.default_to_global
        )
        return pb.GetModeResponse(mode=_MODE_TO_PB[mode])

    @_translating
    def UpdateMode(
        self, request: pb.UpdateModeRequest, context: grpc.ServicerContext
    ) -> pb.UpdateModeResponse:
        """See the proto."""
        wanted = _PB_TO_MODE.get(request.mode)
        if wanted is None:
            raise InvalidModeError(
                f"mode: {request.mode} is not a mode; use MODE_READWRITE, MODE_READONLY or"
                " MODE_IMPORT",
                field="mode",
            )

        def produce() -> pb.UpdateModeResponse:
            mode = self._registry.set_mode(
                request.subject or None, wanted.value, force=request.force
            )
            return pb.UpdateModeResponse(mode=_MODE_TO_PB[mode])

        return self._once("UpdateMode", request.request_id, produce)

    @_translating
    def DeleteMode(
        self, request: pb.DeleteModeRequest, context: grpc.ServicerContext
    ) -> pb.DeleteModeResponse:
        """See the proto."""

        def produce() -> pb.DeleteModeResponse:
            old = self._registry.delete_mode(request.subject or None)
            return pb.DeleteModeResponse(previous_mode=_MODE_TO_PB[old])

        return self._once("DeleteMode", request.request_id, produce)


def add_to_server(
    registry: SchemaRegistry, lookups: LookupCounter | None = None
) -> Callable[[grpc.Server], None]:
    """A ``register`` callback for ``lockgate.common.grpc_server.build_server``."""

    def register(server: grpc.Server) -> None:
        pb_grpc.add_SchemaRegistryServiceServicer_to_server(
            SchemaRegistryServicer(registry, lookups), server
        )

    return register
