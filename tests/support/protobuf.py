"""Protobuf message classes compiled at test time (protoc from grpc_tools, a private pool).

Each call gets its own descriptor pool, so two versions of one ``.proto`` file can live in one
test process (the default pool refuses a second file of the same name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc

from lockgate.schema_registry.protobuf_schema import WELL_KNOWN_DIR


def compile_protos(workdir: Path, files: dict[str, str]) -> descriptor_pool.DescriptorPool:
    """Compile ``{import path: .proto text}`` (imports among them allowed) into a fresh pool."""
    source = workdir / f"protos-{len(list(workdir.glob('protos-*')))}"
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    out = source / "set.pb"
    arguments = [
        "protoc",
        f"--proto_path={source}",
        f"--proto_path={WELL_KNOWN_DIR}",
        "--include_imports",
        f"--descriptor_set_out={out}",
        *files,
    ]
    assert protoc.main(arguments) == 0, f"protoc refused {sorted(files)}"
    compiled = descriptor_pb2.FileDescriptorSet()
    compiled.ParseFromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in compiled.file:
        pool.Add(file)
    return pool


def message_class(pool: descriptor_pool.DescriptorPool, full_name: str) -> Any:
    """The generated-style class of one message in ``pool``."""
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))
