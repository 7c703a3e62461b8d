"""Who may call what: the one table from every RPC of every service to the roles allowed.

Roles (DESIGN.md, Trust model): ``admin`` (everything a person may do), ``operator``
(pipeline lifecycle and offsets), ``viewer`` (reads), ``executor`` (membership and
reports, only for its own executor id: the request's ``executor_id`` must equal the
caller's principal), ``coordinator`` (the executors' control calls), and for the schema
registry ``schema-writer`` (writes, as Confluent's and Karapace's basic-auth roles).

The executors' four calls are ``coordinator`` only, ``admin`` included out: each carries a
leader epoch that the executor fences with, and one forged epoch (2^63-1) made an executor
refuse the real leader (issue 8). A method missing from the table is refused
(``PERMISSION_DENIED``): nothing is open by default; a unit test checks that every RPC of the
protos has its row. Health and reflection are not in the table: they stay open.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


class Role(enum.StrEnum):
    """A role a principal holds (``roles`` in the ``--auth-tokens`` file)."""

    ADMIN = "admin"
    OPERATOR = "operator"
    VIEWER = "viewer"
    EXECUTOR = "executor"
    COORDINATOR = "coordinator"
    SCHEMA_WRITER = "schema-writer"


@dataclass(frozen=True)
class MethodAccess:
    """The roles allowed to call one method. With ``own_executor``, the ``executor`` role
    may call it only for the request's ``executor_id`` equal to the caller's principal."""

    roles: frozenset[Role]
    own_executor: bool = False


_A, _O, _V, _E, _C, _W = (
    Role.ADMIN,
    Role.OPERATOR,
    Role.VIEWER,
    Role.EXECUTOR,
    Role.COORDINATOR,
    Role.SCHEMA_WRITER,
)
_READ = MethodAccess(frozenset({_A, _O, _V}))
_MANAGE = MethodAccess(frozenset({_A, _O}))
_EXECUTOR_OWN = MethodAccess(frozenset({_A, _E}), own_executor=True)
_CONTROL = MethodAccess(frozenset({_C}))
#: Schema registry reads and writes (gRPC and REST alike). Executors and coordinators read
#: schemas to decode records.
REGISTRY_READ = MethodAccess(frozenset({_A, _O, _V, _W, _E, _C}))
REGISTRY_WRITE = MethodAccess(frozenset({_A, _W}))

_COORDINATOR = "/lockgate.v1.CoordinatorService/"
_EXECUTOR = "/lockgate.v1.ExecutorService/"
_REGISTRY = "/lockgate.v1.SchemaRegistryService/"

_ROWS: dict[str, MethodAccess] = {
    _COORDINATOR + "GetClusterInfo": MethodAccess(frozenset({_A, _O, _V, _E, _C})),
    # membership and reports: an executor for itself
    _COORDINATOR + "RegisterExecutor": _EXECUTOR_OWN,
    _COORDINATOR + "Heartbeat": _EXECUTOR_OWN,
    _COORDINATOR + "DeregisterExecutor": _EXECUTOR_OWN,
    _COORDINATOR + "ReportPrecommit": _EXECUTOR_OWN,
    _COORDINATOR + "ReportPrecommits": _EXECUTOR_OWN,
    _COORDINATOR + "ReportTaskFailure": _EXECUTOR_OWN,
    _COORDINATOR + "ReportCheckpointFailure": _EXECUTOR_OWN,
    # pipeline lifecycle and offsets
    _COORDINATOR + "CreatePipeline": _MANAGE,
    _COORDINATOR + "UpdatePipeline": _MANAGE,
    _COORDINATOR + "DeletePipeline": _MANAGE,
    _COORDINATOR + "PausePipeline": _MANAGE,
    _COORDINATOR + "ResumePipeline": _MANAGE,
    _COORDINATOR + "StopPipeline": _MANAGE,
    _COORDINATOR + "RestartPipeline": _MANAGE,
    _COORDINATOR + "RestartTask": _MANAGE,
    _COORDINATOR + "ResetOffsets": _MANAGE,
    # reads
    _COORDINATOR + "GetPipeline": _READ,
    _COORDINATOR + "ListPipelines": _READ,
    _COORDINATOR + "ValidatePipeline": _READ,
    _COORDINATOR + "GetPipelineStatus": _READ,
    _COORDINATOR + "ListTasks": _READ,
    _COORDINATOR + "GetOffsets": _READ,
    _COORDINATOR + "ListCheckpoints": _READ,
    _COORDINATOR + "GetCheckpoint": _READ,
    # executor control: the leader only (every call carries its epoch)
    _EXECUTOR + "TriggerCheckpoint": _CONTROL,
    _EXECUTOR + "TriggerCheckpoints": _CONTROL,
    _EXECUTOR + "CommitCheckpoint": _CONTROL,
    _EXECUTOR + "AbortCheckpoint": _CONTROL,
    _EXECUTOR + "NotifyAssignment": _CONTROL,
    _EXECUTOR + "GetExecutorStatus": _CONTROL,
    # schema registry
    **{
        _REGISTRY + name: REGISTRY_READ
        for name in (
            "GetSchema",
            "ListSchemaVersions",
            "LookupSchema",
            "ListSubjects",
            "ListSubjectVersions",
            "GetSubjectVersion",
            "CheckCompatibility",
            "GetCompatibilityConfig",
            "ListReferencingSchemas",
            "ListSchemas",
            "GetMode",
        )
    },
    **{
        _REGISTRY + name: REGISTRY_WRITE
        for name in (
            "RegisterSchema",
            "UpdateCompatibilityConfig",
            "DeleteCompatibilityConfig",
            "DeleteSubject",
            "DeleteSubjectVersion",
            "UpdateMode",
            "DeleteMode",
        )
    },
}
METHOD_ACCESS: Mapping[str, MethodAccess] = MappingProxyType(_ROWS)
"""Full gRPC method name (``/lockgate.v1.CoordinatorService/CreatePipeline``) -> access."""


def access_of(method: str) -> MethodAccess | None:
    """The access row of a full method name; None: nobody may call it."""
    return METHOD_ACCESS.get(method)


__all__ = ["METHOD_ACCESS", "REGISTRY_READ", "REGISTRY_WRITE", "MethodAccess", "Role", "access_of"]
