"""Ship the Python code Spark's workers import, from the executor itself.

Spark's Python workers unpickle Lockgate's data sources (``kafka_source.py``,
``kafka_sink.py``) by reference, so they must import ``lockgate.executor`` and what it
imports (``lockgate.common``, the serde of ``lockgate.schema_registry``); a Python transform's
UDFs import the pipeline's module. On ``local[*]`` the workers share the executor's
``sys.path``; on a cluster (``spark://``, ``k8s://``) they do not, so the executor zips those
packages at start and adds the zip with ``SparkContext.addPyFile`` (what
``spark.submit.pyFiles`` does), and adds a transform's module the first time a pipeline
uses it. The workers then need only pyspark and the declared third-party dependencies.

Whole packages are shipped, not a computed import closure: the codecs are imported lazily
(per record format), and a closure computed at start would miss them.
"""

from __future__ import annotations

import importlib.util
import sysconfig
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

#: The packages Spark's Python workers import (the data sources and their formats).
WORKER_PACKAGES: tuple[str, ...] = (
    "lockgate.common",
    "lockgate.executor",
    "lockgate.schema_registry",
)
#: The zip's file name; Spark refuses two shipped files of one name.
LOCKGATE_ZIP = "lockgate-worker-code.zip"


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{package} is not an importable package")
    return Path(next(iter(spec.submodule_search_locations)))


def build_code_zip(
    target: Path, packages: Sequence[str] = WORKER_PACKAGES, *, arcroot: str | None = None
) -> Path:
    """Zip the ``.py`` files of ``packages`` into ``target``, importable from the zip.

    Each package keeps its dotted path inside the zip (``lockgate/executor/...``). The
    ``lockgate`` namespace package has no ``__init__.py``: zipimport finds such a package
    (PEP 420) only through an explicit directory entry, so every directory gets one.
    """
    directories: set[str] = set()
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for package in packages:
            root = _package_dir(package)
            prefix = Path(*package.split(".")) if arcroot is None else Path(arcroot)
            for source in sorted(root.rglob("*.py")):
                if "__pycache__" in source.parts:
                    continue
                name = prefix / source.relative_to(root)
                for parent in reversed(name.parents[:-1]):
                    if parent.as_posix() not in directories:
                        directories.add(parent.as_posix())
                        archive.writestr(f"{parent.as_posix()}/", b"")
                archive.write(source, name.as_posix())
    return target


def _installed(path: Path) -> bool:
    """True for code installed in the interpreter's site-packages (a declared dependency,
    which the workers have), False for a source tree."""
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    return any(root in path.resolve().parents for root in installed)


def _shipping_dir(context: SparkContext) -> Path:
    """PySpark's temp directory of ``context`` (in ``spark.local.dir``, deleted when the JVM
    stops), where the zips live as long as the SparkContext serves them."""
    directory = Path(context._temp_dir) / "lockgate-shipped"
    directory.mkdir(exist_ok=True)
    return directory


def _shipped(context: SparkContext, file_name: str) -> bool:
    return any(path.rsplit("/", 1)[-1] == file_name for path in context.listFiles)


def ship_lockgate(context: SparkContext) -> Path:
    """Zip :data:`WORKER_PACKAGES` and add the zip to ``context``; call before registering
    the data sources, whose Python functions capture the context's includes when made."""
    archive = build_code_zip(_shipping_dir(context) / LOCKGATE_ZIP)
    if not _shipped(context, LOCKGATE_ZIP):
        context.addPyFile(str(archive))
    return archive


def ship_module(
    context: SparkContext, module: str, *, directory: Path | None = None
) -> Path | None:
    """Add the top-level package (zipped, in ``directory``: by default PySpark's temp
    dir) or module file of ``module`` to ``context`` once, unless it is Lockgate's own
    or installed in site-packages; returns what was added.

    A module changed on disk after it was shipped is not shipped again: the executor has
    imported it once too, so driver and workers keep running the same code.
    """
    top = module.split(".", 1)[0]
    if top == "lockgate":
        return None
    spec = importlib.util.find_spec(top)
    if spec is None:
        return None  # the batch's import reports it, as a TransformError
    if spec.submodule_search_locations:
        package_dir = Path(next(iter(spec.submodule_search_locations)))
        file_name = f"transform-{top}.zip"
        if _installed(package_dir) or _shipped(context, file_name):
            return None
        shipped = build_code_zip(
            (directory or _shipping_dir(context)) / file_name, (top,), arcroot=top
        )
    else:
        if spec.origin is None or not spec.origin.endswith(".py"):
            return None
        shipped = Path(spec.origin)
        if _installed(shipped) or _shipped(context, shipped.name):
            return None
    context.addPyFile(str(shipped))
    return shipped


__all__ = ["LOCKGATE_ZIP", "WORKER_PACKAGES", "build_code_zip", "ship_lockgate", "ship_module"]
