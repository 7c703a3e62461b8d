"""Which modules a `transform.python` may come from: the executor's allow-list.

Kept apart from the Spark data plane (no PySpark import), so the command line checks its
flags and tests check the rule without a SparkSession.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Module prefixes every executor allows: the project's example transforms.
EXAMPLE_TRANSFORM_MODULES = ("lockgate.executor.examples",)
#: What `--allow-transform-module` accepts: a dotted module name.
MODULE_PREFIX_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def module_allowed(module: str, allowed_prefixes: Sequence[str]) -> bool:
    """Whether `module` is one of the prefixes or inside one (`a.b` allows `a.b.c`, not
    `a.bc`)."""
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed_prefixes)
