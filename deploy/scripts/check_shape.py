"""make lint: no production module over 700 lines and no function over 80 (STYLE.md).

A file that needs a table of contents is two files; a function that needs a scroll is
several. Generated stubs (`lockgate/v1`) and Alembic migrations (DDL, written once) are
left out. Prints every offender with its size and exits 1 if there is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
ROOTS = ("common", "coordinator", "executor", "schema_registry", "clients/python", "deploy/local")
SKIPPED_PARTS = ("/lockgate/v1/", "/migrations/")


def production_modules(repo: Path) -> list[Path]:
    """Every Python module of the services, the client and the local cluster."""
    modules: list[Path] = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            if not any(part in path.as_posix() for part in SKIPPED_PARTS):
                modules.append(path)
    return modules


def offences(path: Path, repo: Path) -> list[str]:
    """What in one module is over its bound, as `path:line: what`."""
    text = path.read_text()
    where = path.relative_to(repo)
    found: list[str] = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES}): split it by concern")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{where}:{node.lineno}: {node.name}() has {length} lines "
                    f"(at most {MAX_FUNCTION_LINES})"
                )
    return found


def main() -> int:
    repo = Path(__file__).resolve().parents[2]
    found = [o for path in production_modules(repo) for o in offences(path, repo)]
    for offence in found:
        print(offence)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
