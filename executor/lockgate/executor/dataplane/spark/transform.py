"""A batch's transform, run only as far as the executor allows.

Python transforms (`transform.python: module:function`) run only from modules under a prefix
the executor allows (`--allow-transform-module`, plus the project's examples): the module
name is checked before it is imported, so no code of another module runs. Importing
`a.b.c` runs the `__init__` of `a` and `a.b` too: allow a prefix only where its parents are
trusted as well.

SQL transforms (`transform.sql`) were checked by the spec parser to be one query with no
file path (`lockgate.common.model.sql_transform`, a tokenizer). Here Spark's own parser reads
the query first, and it runs only when it is a query (no `Command`) whose every relation is a
view of its own batch (`input`, one per source topic) or a common table expression it names;
the session has `spark.sql.runSQLOnFiles` off (`session.py`). Batches of every pipeline share
one SparkSession (sessions made by newSession() do not see the registered Python data
sources), so the views are registered, the query analysed (which binds the plan to them) and
the views dropped again under one process-wide lock: no transform can ever see another
pipeline's views.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.executor.dataplane.spark.code_shipping import ship_module
from lockgate.executor.dataplane.transform_modules import EXAMPLE_TRANSFORM_MODULES, module_allowed
from lockgate.executor.errors import TransformError

INPUT_VIEW = "input"
_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Process-wide on purpose: it guards the one shared session's temp view names.
_VIEWS_LOCK = threading.Lock()
_COMMAND_CLASS = "org.apache.spark.sql.catalyst.plans.logical.Command"
# Statements that are no Command but still write (Spark's parsed, not yet planned, forms).
_WRITING_NODES = frozenset({"InsertIntoStatement", "InsertIntoDir"})


def spark_message(exc: BaseException) -> str:
    """The useful head of a Spark error: Py4J appends a long Java stack trace."""
    text = str(exc)
    return text if len(text) <= 4000 else text[:4000] + " …"


def view_names(topics: Sequence[str]) -> tuple[str, ...]:
    """The temp views a batch of `topics` registers: `input`, and each topic whose name is
    an SQL identifier (Spark refuses others as view names: reachable through `input`)."""
    return (INPUT_VIEW, *(t for t in topics if t != INPUT_VIEW and _IDENTIFIER_RE.match(t)))


def apply_transform(
    session: SparkSession,
    spec: PipelineSpec,
    source: DataFrame,
    *,
    allowed_modules: Sequence[str] = EXAMPLE_TRANSFORM_MODULES,
) -> DataFrame:
    """Apply the spec's transform to the source DataFrame; ``TransformError`` on failure.

    SQL runs against the temp view ``input`` (and one named after each source topic).
    A Python transform ``module:function`` from an allowed module gets the DataFrame and
    returns one.
    """
    transform = spec.transform
    if transform.sql is not None:
        return _apply_sql(session, transform.sql, source, spec.source.topics)
    if transform.python_target is None:
        return source  # no transform: records pass unchanged
    module, name = transform.python_target
    target = f"{module}:{name}"
    if not module_allowed(module, allowed_modules):
        raise TransformError(
            f"transform.python {target!r}: module {module!r} is not allowed on this executor"
            f" (allowed: {', '.join(allowed_modules)}); start the executor with"
            f" `--allow-transform-module {module}` (or a prefix of it) to run it"
        )
    # The module's UDFs are unpickled on the workers, which import it from what is shipped.
    ship_module(session.sparkContext, module)
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise TransformError(f"transform.python {target!r} cannot be imported: {exc}") from exc
    try:
        result = function(source)
    except PySparkException as exc:
        raise TransformError(f"transform.python {target!r} failed: {spark_message(exc)}") from exc
    if not isinstance(result, DataFrame):
        raise TransformError(
            f"transform.python {target!r} must return a DataFrame, got {type(result).__name__}"
        )
    return result


def _apply_sql(
    session: SparkSession, sql: str, source: DataFrame, topics: Sequence[str]
) -> DataFrame:
    views = view_names(topics)
    _check_sql_reads_only(session, sql, views)
    with _VIEWS_LOCK:
        for view in views:
            whole = view == INPUT_VIEW or len(topics) == 1
            (source if whole else source.where(F.col("topic") == view)).createOrReplaceTempView(
                view
            )
        try:
            # Analysis (inside sql()) binds the plan: dropping the views after it does not
            # change it.
            return session.sql(sql)
        except PySparkException as exc:
            raise TransformError(f"transform.sql failed: {spark_message(exc)}") from exc
        finally:
            for view in views:
                session.catalog.dropTempView(view)


def _check_sql_reads_only(session: SparkSession, sql: str, views: Sequence[str]) -> None:
    """Parse `sql` with Spark's parser: a query whose relations are all `views` or common
    table expressions it defines; ``TransformError`` naming what is not."""
    jvm = session._jvm
    assert jvm is not None
    try:
        plan = session._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    except Exception:  # py4j's raw ParseException: nothing can run
        return  # session.sql() reports the same syntax error, in PySpark's words
    command = jvm.java.lang.Class.forName(_COMMAND_CLASS)
    nodes = list(_nodes(plan))
    ctes = {name.lower() for node in nodes for name in _cte_names(node)}
    allowed = {view.lower() for view in views} | ctes
    for node in nodes:
        kind = node.getClass().getSimpleName()
        if command.isInstance(node) or kind in _WRITING_NODES:
            raise TransformError(
                f"transform.sql is a {kind}, not a query: write one SELECT over the batch's"
                f" views ({', '.join(views)})"
            )
        if kind == "UnresolvedRelation":
            name = _seq(node.multipartIdentifier())
            if len(name) != 1 or name[0].lower() not in allowed:
                shown = ".".join(f"`{part}`" for part in name)
                raise TransformError(
                    f"transform.sql reads {shown}, which is not one of its batch's views: read"
                    f" from {', '.join(f'`{v}`' for v in views)} only"
                )


def _nodes(plan: Any) -> Iterator[Any]:
    """Every node of a parsed plan: children, inner children (a WITH's common table
    expressions) and subqueries inside expressions, recursively."""
    yield plan
    for getter in ("children", "innerChildren", "subqueries"):
        for child in _seq(getattr(plan, getter)()):
            yield from _nodes(child)


def _cte_names(node: Any) -> list[str]:
    if node.getClass().getSimpleName() != "UnresolvedWith":
        return []
    return [str(pair._1()) for pair in _seq(node.cteRelations())]


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]
