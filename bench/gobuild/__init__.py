"""The benchmarks' Go programs (``bench/<name>/``), built with ``go build`` when their sources
changed and cached under ``bench/<name>/build/``."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path


class GoBuildError(Exception):
    """A Go program could not be built; the message says why."""


def go_binary(module: Path, *, also: Iterable[Path] = ()) -> Path:
    """The binary of the Go module in ``module``, built unless it is newer than the module's
    sources and ``also`` (sources it builds against, e.g. through a replace directive).

    Raises GoBuildError naming the cause: Go missing, or the build's last line of output."""
    binary = module / "build" / module.name
    sources = [*module.glob("*.go"), module / "go.mod", module / "go.sum", *also]
    newest_source = max(path.stat().st_mtime for path in sources)
    if binary.exists() and binary.stat().st_mtime >= newest_source:
        return binary
    go = shutil.which("go")
    if go is None:
        raise GoBuildError(f"Go is not installed, so bench/{module.name} cannot be built")
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=module,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if built.returncode != 0:
        reason = (built.stderr.strip().splitlines() or ["no output"])[-1]
        raise GoBuildError(f"go build of bench/{module.name} failed: {reason}")
    return binary
