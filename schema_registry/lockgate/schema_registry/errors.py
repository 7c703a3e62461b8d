"""Errors the schema registry raises, each carrying Confluent's REST error code.

The REST facade turns them into Confluent's ``{"error_code", "message"}`` body with the HTTP
status Confluent uses; the gRPC servicer turns them into a status code (``status_name``) with
a field violation naming ``field``. Neither transport adds anything to the message: it is
written here, once, for the user.
"""

from __future__ import annotations


class RegistryError(Exception):
    """Base of every error the registry reports to a caller."""

    #: Confluent's error code (``error_code`` in the REST body).
    error_code: int = 50001
    #: HTTP status the REST facade answers with.
    http_status: int = 500
    #: Name of the gRPC status code (``grpc.StatusCode`` member) the servicer answers with.
    status_name: str = "INTERNAL"

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        #: The request field that was wrong ("" when the error is not about one field).
        self.field = field


class SubjectNotFoundError(RegistryError):
    """The subject has no version visible to the request (40401)."""

    error_code = 40401
    http_status = 404
    status_name = "NOT_FOUND"


class VersionNotFoundError(RegistryError):
    """The subject has no such version (40402)."""

    error_code = 40402
    http_status = 404
    status_name = "NOT_FOUND"


class SchemaNotFoundError(RegistryError):
    """No schema has that id, or the schema is not registered under the subject (40403)."""

    error_code = 40403
    http_status = 404
    status_name = "NOT_FOUND"


class SubjectSoftDeletedError(RegistryError):
    """The subject was already soft-deleted (40404)."""

    error_code = 40404
    http_status = 404
    status_name = "FAILED_PRECONDITION"


class SubjectNotSoftDeletedError(RegistryError):
    """A permanent delete of a subject that was not soft-deleted first (40405)."""

    error_code = 40405
    http_status = 404
    status_name = "FAILED_PRECONDITION"


class VersionSoftDeletedError(RegistryError):
    """The version was already soft-deleted (40406)."""

    error_code = 40406
    http_status = 404
    status_name = "FAILED_PRECONDITION"


class VersionNotSoftDeletedError(RegistryError):
    """A permanent delete of a version that was not soft-deleted first (40407)."""

    error_code = 40407
    http_status = 404
    status_name = "FAILED_PRECONDITION"


class SubjectConfigNotFoundError(RegistryError):
    """The subject has no compatibility level of its own (40408)."""

    error_code = 40408
    http_status = 404
    status_name = "NOT_FOUND"


class SubjectModeNotFoundError(RegistryError):
    """The subject has no mode of its own (40409)."""

    error_code = 40409
    http_status = 404
    status_name = "NOT_FOUND"


class IncompatibleSchemaError(RegistryError):
    """The schema breaks the subject's compatibility level (409); ``reasons`` says how."""

    error_code = 409
    http_status = 409
    status_name = "FAILED_PRECONDITION"

    def __init__(self, message: str, *, reasons: tuple[str, ...] = (), field: str = "") -> None:
        super().__init__(message, field=field or "schema")
        self.reasons = reasons


class InvalidSchemaError(RegistryError):
    """The schema text is invalid, too large, or names a reference that does not exist (42201)."""

    error_code = 42201
    http_status = 422
    status_name = "INVALID_ARGUMENT"


class InvalidVersionError(RegistryError):
    """The version is not a positive integer nor ``latest`` / ``-1`` (42202)."""

    error_code = 42202
    http_status = 422
    status_name = "INVALID_ARGUMENT"


class InvalidCompatibilityLevelError(RegistryError):
    """The compatibility level is not one of the seven Confluent names (42203)."""

    error_code = 42203
    http_status = 422
    status_name = "INVALID_ARGUMENT"


class InvalidModeError(RegistryError):
    """The mode is not READWRITE, READONLY or IMPORT (42204)."""

    error_code = 42204
    http_status = 422
    status_name = "INVALID_ARGUMENT"


class OperationNotPermittedError(RegistryError):
    """The subject's mode forbids the operation (42205): read-only, or an id outside IMPORT."""

    error_code = 42205
    http_status = 422
    status_name = "FAILED_PRECONDITION"


class IdDoesNotMatchError(RegistryError):
    """An imported schema's id is already another schema's (42207)."""

    error_code = 42207
    http_status = 422
    status_name = "FAILED_PRECONDITION"


class ReferenceExistsError(RegistryError):
    """The version is referenced by another schema and cannot be deleted (42206).

    Confluent's ``REFERENCE_EXISTS_ERROR_CODE`` (``rest/exceptions/Errors.java``), raised by
    ``KafkaSchemaRegistry.deleteSchemaVersion`` while ``getReferencedBy`` is not empty.
    """

    error_code = 42206
    http_status = 422
    status_name = "FAILED_PRECONDITION"


class InvalidSubjectError(RegistryError):
    """The subject name is empty, too long or contains control characters (42208)."""

    error_code = 42208
    http_status = 422
    status_name = "INVALID_ARGUMENT"


class BadRequestError(RegistryError):
    """The request body is not JSON or not the object the endpoint expects (400)."""

    error_code = 400
    http_status = 400
    status_name = "INVALID_ARGUMENT"


class StoreUnavailableError(RegistryError):
    """The database could not complete the operation after retries (50001)."""

    error_code = 50001
    http_status = 500
    status_name = "UNAVAILABLE"
