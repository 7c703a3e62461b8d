"""What the executor ships to Spark's workers (``dataplane/spark/code_shipping.py``)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.executor.dataplane.spark.code_shipping import build_code_zip, ship_module

#: What Spark's Python workers import: the data sources, every codec, and the registry serde.
WORKER_MODULES = (
    "lockgate.executor.dataplane.spark.kafka_source",
    "lockgate.executor.dataplane.spark.kafka_sink",
    "lockgate.executor.dataplane.spark.json_schema_codec",
    "lockgate.executor.dataplane.spark.protobuf_codec",
    "lockgate.schema_registry.protobuf_serde",
)


class _Context:
    """The two SparkContext calls shipping makes."""

    def __init__(self) -> None:
        self.listFiles: list[str] = []

    def addPyFile(self, path: str) -> None:
        self.listFiles.append(f"spark://driver:1/files/{Path(path).name}")


def test_the_zip_holds_every_lockgate_module_the_workers_import(tmp_path: Path) -> None:
    """A module the data sources import from a package that is not shipped (a generated
    ``lockgate.v1`` stub, say) would fail on every cluster worker, never on ``local[*]``."""
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; import {', '.join(WORKER_MODULES)}; "
            "print('\\n'.join(m.__file__ or '' for n, m in list(sys.modules.items())"
            " if n.startswith('lockgate.') and getattr(m, '__file__', None)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    names = set(zipfile.ZipFile(build_code_zip(tmp_path / "code.zip")).namelist())
    missing = [
        path
        for path in imported
        if not any(path.replace("\\", "/").endswith("/" + name) for name in names)
    ]
    assert not missing, f"imported by the workers but not shipped: {missing}"
    # zipimport finds the ``lockgate`` namespace package only through directory entries.
    assert {"lockgate/", "lockgate/executor/", "lockgate/common/model/"} <= names


@pytest.fixture
def transform_package(tmp_path: Path) -> Iterator[Path]:
    package = tmp_path / "src" / "my_transforms"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "enrich.py").write_text("def run(frame):\n    return frame\n")
    sys.path.insert(0, str(package.parent))
    yield package
    sys.path.remove(str(package.parent))


def test_a_transform_package_is_zipped_and_added_once(
    transform_package: Path, tmp_path: Path
) -> None:
    context = _Context()
    shipped = ship_module(context, "my_transforms.enrich", directory=tmp_path)  # type: ignore[arg-type]
    assert shipped == tmp_path / "transform-my_transforms.zip"  # not in the source tree
    assert "my_transforms/enrich.py" in zipfile.ZipFile(shipped).namelist()
    assert ship_module(context, "my_transforms.other", directory=tmp_path) is None  # type: ignore[arg-type]
    assert context.listFiles == ["spark://driver:1/files/transform-my_transforms.zip"]


def test_lockgate_and_installed_packages_are_not_shipped_again(tmp_path: Path) -> None:
    context = _Context()
    assert ship_module(context, "lockgate.executor.errors", directory=tmp_path) is None  # type: ignore[arg-type]
    assert ship_module(context, "yaml", directory=tmp_path) is None  # type: ignore[arg-type]
    assert context.listFiles == []
