"""Checks on the v1 protobuf contracts (protos/lockgate/v1) and their generated Python.

The protos are Lockgate's public API: these tests fail CI when a proto is edited without
regenerating clients/python/lockgate/v1, when `buf lint` objects, when a definition has
no comment, or when a call misses the fields that make it idempotent or fenced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "protos"
PROTO_PACKAGE = "lockgate.v1"
PROTO_PACKAGE_DIR = PROTO_ROOT / "lockgate" / "v1"
GENERATED_DIR = REPO_ROOT / "clients" / "python" / "lockgate" / "v1"
# Hand-written files that live beside the generated ones.
NOT_GENERATED = {"__init__.py"}
# The venv's bin holds protoc-gen-mypy, protoc-gen-mypy_grpc and buf.
VENV_BIN = Path(sys.executable).parent
REGENERATE_HINT = (
    "PATH=.venv/bin:$PATH .venv/bin/python -m grpc_tools.protoc -I protos "
    "--python_out=clients/python --grpc_python_out=clients/python "
    "--mypy_out=clients/python --mypy_grpc_out=clients/python protos/lockgate/v1/*.proto"
)

# Read-only RPCs need no request_id: they are named so, or marked NO_SIDE_EFFECTS.
READ_ONLY_PREFIXES = ("Get", "List", "Lookup", "Check", "Validate")
# Heartbeat changes only the sender's own liveness and observed state: repeating one is
# harmless by construction, so it carries no request_id.
NATURALLY_IDEMPOTENT_RPCS = {"lockgate.v1.CoordinatorService.Heartbeat"}

# Field numbers of descriptor.proto, used to build SourceCodeInfo location paths.
FILE_MESSAGE_TYPE = 4
FILE_ENUM_TYPE = 5
FILE_SERVICE = 6
MESSAGE_FIELD = 2
MESSAGE_NESTED_TYPE = 3
MESSAGE_ENUM_TYPE = 4
MESSAGE_ONEOF_DECL = 8
ENUM_VALUE = 2
SERVICE_METHOD = 2


def _proto_files() -> list[str]:
    """Return the package's .proto files, relative to protos/, sorted."""
    files = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_PACKAGE_DIR.glob("*.proto"))
    assert files, f"no .proto files found in {PROTO_PACKAGE_DIR}"
    return files


def _tool_env() -> dict[str, str]:
    """Return the environment with the venv's bin first, where protoc plugins live."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run_protoc(*args: str) -> None:
    """Run grpc_tools' protoc from protos/ with the given arguments; fail on any error."""
    command = [sys.executable, "-m", "grpc_tools.protoc", "-I", str(PROTO_ROOT), *args]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=_tool_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"protoc failed:\n{result.stdout}\n{result.stderr}"


def _generated_files(directory: Path) -> dict[str, bytes]:
    """Return the generated files of a lockgate/v1 output directory, by name."""
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.is_file() and path.name not in NOT_GENERATED
    }


@pytest.fixture(scope="module")
def descriptor_set(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorSet:
    """Compile the protos with source info (comments) into a FileDescriptorSet."""
    out = tmp_path_factory.mktemp("descriptors") / "lockgate.pb"
    _run_protoc("--include_source_info", f"--descriptor_set_out={out}", *_proto_files())
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _package_files(
    descriptor_set: descriptor_pb2.FileDescriptorSet,
) -> list[descriptor_pb2.FileDescriptorProto]:
    """Return the files of the lockgate.v1 package from a descriptor set."""
    files = [f for f in descriptor_set.file if f.package == PROTO_PACKAGE]
    assert files, f"no file of package {PROTO_PACKAGE} in the descriptor set"
    return files


@dataclass(frozen=True)
class Definition:
    """One commentable definition of a proto file and its SourceCodeInfo path."""

    kind: str
    full_name: str
    path: tuple[int, ...]


def _message_definitions(
    message: descriptor_pb2.DescriptorProto, prefix: str, path: tuple[int, ...]
) -> Iterator[Definition]:
    """Yield a message, its fields, oneofs, nested messages and nested enums."""
    full_name = f"{prefix}.{message.name}"
    if message.options.map_entry:
        # Synthetic map entry messages have no source of their own to comment.
        return
    yield Definition("message", full_name, path)
    for index, field in enumerate(message.field):
        yield Definition("field", f"{full_name}.{field.name}", (*path, MESSAGE_FIELD, index))
    for index, oneof in enumerate(message.oneof_decl):
        if oneof.name.startswith("_"):
            # proto3 `optional` fields get a synthetic oneof named "_<field>".
            continue
        yield Definition("oneof", f"{full_name}.{oneof.name}", (*path, MESSAGE_ONEOF_DECL, index))
    for index, nested in enumerate(message.nested_type):
        yield from _message_definitions(nested, full_name, (*path, MESSAGE_NESTED_TYPE, index))
    for index, enum in enumerate(message.enum_type):
        yield from _enum_definitions(enum, full_name, (*path, MESSAGE_ENUM_TYPE, index))


def _enum_definitions(
    enum: descriptor_pb2.EnumDescriptorProto, prefix: str, path: tuple[int, ...]
) -> Iterator[Definition]:
    """Yield an enum and its values."""
    full_name = f"{prefix}.{enum.name}"
    yield Definition("enum", full_name, path)
    for index, value in enumerate(enum.value):
        yield Definition("enum value", f"{full_name}.{value.name}", (*path, ENUM_VALUE, index))


def _file_definitions(proto_file: descriptor_pb2.FileDescriptorProto) -> Iterator[Definition]:
    """Yield every commentable definition of a file."""
    package = proto_file.package
    for index, message in enumerate(proto_file.message_type):
        yield from _message_definitions(message, package, (FILE_MESSAGE_TYPE, index))
    for index, enum in enumerate(proto_file.enum_type):
        yield from _enum_definitions(enum, package, (FILE_ENUM_TYPE, index))
    for index, service in enumerate(proto_file.service):
        service_name = f"{package}.{service.name}"
        yield Definition("service", service_name, (FILE_SERVICE, index))
        for method_index, method in enumerate(service.method):
            yield Definition(
                "rpc",
                f"{service_name}.{method.name}",
                (FILE_SERVICE, index, SERVICE_METHOD, method_index),
            )


def test_generated_python_matches_protos(tmp_path: Path) -> None:
    """Regenerating the stubs gives byte-identical files to the committed ones."""
    _run_protoc(
        f"--python_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        f"--mypy_out={tmp_path}",
        f"--mypy_grpc_out={tmp_path}",
        *_proto_files(),
    )
    fresh = _generated_files(tmp_path / "lockgate" / "v1")
    committed = _generated_files(GENERATED_DIR)

    missing = sorted(fresh.keys() - committed.keys())
    stale = sorted(committed.keys() - fresh.keys())
    differing = sorted(
        name for name in fresh.keys() & committed.keys() if fresh[name] != committed[name]
    )
    assert not (missing or stale or differing), (
        f"clients/python/lockgate/v1 is out of date with protos/ "
        f"(missing: {missing}, not generated by any proto: {stale}, differing: {differing}); "
        f"regenerate with `make protos`, i.e. {REGENERATE_HINT}"
    )


def test_buf_lint_passes() -> None:
    """`buf lint` (STANDARD and COMMENTS rules, protos/buf.yaml) reports nothing."""
    buf = VENV_BIN / "buf"
    assert buf.exists(), f"{buf} is missing: install the dev dependencies (pip install buf-bin)"
    result = subprocess.run(
        [str(buf), "lint"],
        cwd=PROTO_ROOT,
        env=_tool_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"buf lint failed:\n{result.stdout}\n{result.stderr}"


def test_every_definition_has_a_leading_comment(
    descriptor_set: descriptor_pb2.FileDescriptorSet,
) -> None:
    """Every RPC, service, message, field, oneof, enum and enum value is documented."""
    undocumented: list[str] = []
    checked = 0
    for proto_file in _package_files(descriptor_set):
        comments = {
            tuple(location.path): location.leading_comments.strip()
            for location in proto_file.source_code_info.location
        }
        for definition in _file_definitions(proto_file):
            checked += 1
            if not comments.get(definition.path):
                undocumented.append(f"{proto_file.name}: {definition.kind} {definition.full_name}")
    # Guards against a walk that silently finds nothing (e.g. source info not included).
    assert checked > 100, f"only {checked} definitions found; is source info included?"
    assert not undocumented, (
        "these definitions need a one-line `//` comment just above them saying what they "
        "mean (and their unit):\n" + "\n".join(undocumented)
    )


# Status code names an RPC comment may list (grpc.StatusCode, upper case).
STATUS_CODE_NAMES = (
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def test_rpc_comments_start_with_the_rpc_name_and_list_status_codes(
    descriptor_set: descriptor_pb2.FileDescriptorSet,
) -> None:
    """Each RPC comment starts with the RPC's own name and names the codes it returns."""
    problems: list[str] = []
    for proto_file in _package_files(descriptor_set):
        comments = {
            tuple(location.path): location.leading_comments.strip()
            for location in proto_file.source_code_info.location
        }
        for definition in _file_definitions(proto_file):
            if definition.kind != "rpc":
                continue
            comment = comments.get(definition.path, "")
            method_name = definition.full_name.rsplit(".", 1)[-1]
            if not comment.startswith(f"{method_name} "):
                problems.append(f"{definition.full_name}: comment must start with {method_name!r}")
            if not any(code in comment for code in STATUS_CODE_NAMES):
                problems.append(
                    f"{definition.full_name}: comment must list the gRPC status codes it returns"
                )
    assert not problems, "\n".join(problems)


def _is_read_only(service: str, method: descriptor_pb2.MethodDescriptorProto) -> bool:
    """Tell whether an RPC only reads, so it needs no request_id."""
    if method.options.idempotency_level == descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS:
        return True
    if f"{service}.{method.name}" in NATURALLY_IDEMPOTENT_RPCS:
        return True
    return method.name.startswith(READ_ONLY_PREFIXES)


def test_mutating_requests_carry_request_id_and_executor_requests_leader_epoch(
    descriptor_set: descriptor_pb2.FileDescriptorSet,
) -> None:
    """Mutating calls are made idempotent by request_id; every ExecutorService call is fenced."""
    files = _package_files(descriptor_set)
    messages = {
        f".{f.package}.{message.name}": message for f in files for message in f.message_type
    }
    problems: list[str] = []
    mutating_seen = 0
    executor_rpcs_seen = 0
    for proto_file in files:
        for service in proto_file.service:
            service_name = f"{proto_file.package}.{service.name}"
            for method in service.method:
                request = messages[method.input_type]
                fields = {field.name: field for field in request.field}
                if not _is_read_only(service_name, method):
                    mutating_seen += 1
                    request_id = fields.get("request_id")
                    if request_id is None or request_id.type != request_id.TYPE_STRING:
                        problems.append(
                            f"{service_name}.{method.name}: {request.name} needs "
                            "`string request_id` (client-chosen, for idempotent retries)"
                        )
                if service.name == "ExecutorService":
                    executor_rpcs_seen += 1
                    epoch = fields.get("leader_epoch")
                    if epoch is None or epoch.type_name != ".lockgate.v1.LeaderEpoch":
                        problems.append(
                            f"{service_name}.{method.name}: {request.name} needs "
                            "`LeaderEpoch leader_epoch` (executors refuse stale leaders)"
                        )
    assert mutating_seen >= 10, f"only {mutating_seen} mutating RPCs found"
    assert executor_rpcs_seen >= 4, f"only {executor_rpcs_seen} ExecutorService RPCs found"
    assert not problems, "\n".join(problems)


def test_generated_modules_import() -> None:
    """The generated modules import and expose both services' stubs and servicers."""
    from lockgate.v1 import common_pb2, coordinator_pb2_grpc, executor_pb2_grpc

    assert hasattr(coordinator_pb2_grpc, "CoordinatorServiceStub")
    assert hasattr(coordinator_pb2_grpc, "add_CoordinatorServiceServicer_to_server")
    assert hasattr(executor_pb2_grpc, "ExecutorServiceStub")
    assert hasattr(executor_pb2_grpc, "add_ExecutorServiceServicer_to_server")
    handle = common_pb2.SinkHandle(
        kafka=common_pb2.KafkaTransactionHandle(transactional_id="copy-0-1")
    )
    # An unknown producer id must be distinguishable from producer id 0.
    assert not handle.kafka.HasField("producer_id")
    assert handle.WhichOneof("handle") == "kafka"
