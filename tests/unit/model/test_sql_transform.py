"""`transform.sql` is one query over the batch: everything else is refused at create time,
as INVALID_ARGUMENT naming `transform.sql`, by the one spec parser."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.errors import InvalidArgument
from lockgate.common.grpc_server import status_code_for
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.common.model.sql_transform import projected_columns, sql_transform_problem


def spec_with(sql: str) -> dict[str, Any]:
    return {
        "name": "copy",
        "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["orders"]}},
        "transform": {"sql": sql},
        "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
    }


@pytest.mark.parametrize(
    ("sql", "description"),
    [
        ("SET spark.sql.runSQLOnFiles=true", "is a `SET` statement, not a query"),
        ("reset", "is a `RESET` statement, not a query"),
        ("CREATE TEMP VIEW x AS SELECT 1", "is a `CREATE` statement, not a query"),
        ("DROP VIEW input", "is a `DROP` statement, not a query"),
        ("ALTER TABLE t ADD COLUMN c INT", "is a `ALTER` statement, not a query"),
        ("CACHE TABLE input", "is a `CACHE` statement, not a query"),
        ("INSERT INTO t SELECT * FROM input", "is a `INSERT` statement, not a query"),
        ("ADD JAR /tmp/evil.jar", "is a `ADD JAR` statement, not a query"),
        ("add file '/etc/passwd'", "is a `ADD FILE` statement, not a query"),
        ("LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE t", "is a `LOAD` statement"),
        ("(SET a=b)", "is a `SET` statement, not a query"),
        ("SELECT 1 FROM input; SET a=b", "holds more than one statement"),
        ("SELECT 1 FROM input; SELECT 2 FROM input", "holds more than one statement"),
        ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "`INSERT` statement after its WITH"),
        ("FROM input INSERT INTO t SELECT *", "writes with INSERT"),
        ("SELECT CAST(value AS BINARY) AS value FROM text.`/etc/passwd`", "reads a file as a"),
        ("SELECT * FROM parquet.`data.parquet`", "reads a file as a table"),
        ("SELECT * FROM `csv`.`file:/tmp/x`", "reads a file as a table"),
        ("SELECT java_method('java.lang.System', 'getenv', 'X') AS value", "calls java_method()"),
        ("SELECT reflect ('java.lang.System', 'getenv') AS value", "calls reflect()"),
        ("SELECT 'unterminated FROM input", "has an unterminated string literal"),
        ("SELECT 1 /* open", "has an unterminated /* comment"),
        ("  ;  ", "is empty"),
    ],
)
def test_refused_sql_is_invalid_argument_naming_transform_sql(sql: str, description: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        parse_pipeline_spec(spec_with(sql))
    assert status_code_for(raised.value) is grpc.StatusCode.INVALID_ARGUMENT
    [violation] = raised.value.violations
    assert violation.field == "transform.sql"
    assert description in violation.description
    assert f"transform.sql: {violation.description}" in str(raised.value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT key, value FROM input",
        "select key, value from input;",
        "(SELECT value FROM orders) UNION ALL (SELECT value FROM input)",
        "WITH a AS (SELECT * FROM input), b (k, v) AS (SELECT key, value FROM a) SELECT * FROM b",
        "FROM input SELECT key, value",
        "VALUES (1, 'a')",
        "TABLE input",
        # Words that name statements are fine inside comments, strings and identifiers.
        "SELECT 'SET a=b; DROP x' AS note, `insert`, value FROM input -- ; DROP\n",
        "/* ADD JAR x; /* nested */ still comment */ SELECT value FROM input",
        r"SELECT 'it\'s; fine' AS a, r'C:\path\' AS b, value FROM input",
        "SELECT value, get_json_object(value, '$.a/b') FROM input",
        "SELECT key, value FROM input WHERE value LIKE 'parquet.`/x`'",
    ],
)
def test_single_queries_are_accepted(sql: str) -> None:
    assert sql_transform_problem(sql) is None
    assert parse_pipeline_spec(spec_with(sql)).transform.sql == sql


_SQL_PIECES = st.sampled_from(
    [
        *("SELECT", "WITH", "SET", "INSERT", "(", ")", ";", "'", '"', "`", "--", "/*", "*/"),
        *("\\", "r'", ".", ",", "AS", "input", "parquet", "`/etc`", "reflect", " ", "\n", "x"),
    ]
)


@given(st.one_of(st.text(max_size=80), st.lists(_SQL_PIECES, max_size=30).map("".join)))
def test_any_text_gets_an_answer_never_an_exception(sql: str) -> None:
    problem = sql_transform_problem(sql)
    assert problem is None or problem.description


def test_a_stored_spec_from_before_the_sql_rules_is_still_read() -> None:
    """A pipeline created before the rules stays readable (get, status, delete); its
    executors parse the spec as sent, without `stored`, and fail its tasks instead."""
    raw = spec_with("SELECT reflect('java.lang.System', 'getenv', 'HOME') AS value FROM input")
    assert parse_pipeline_spec(raw, stored=True).transform.sql is not None
    with pytest.raises(InvalidArgument):
        parse_pipeline_spec(raw)


COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")


@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        ("SELECT key, value, headers FROM input", ("key", "value", "headers")),
        ("select value,key from input;", ("value", "key")),
        ("SELECT * FROM input", COLUMNS),
        ("SELECT `key`, `value` FROM `input`", ("key", "value")),
        ("SELECT /* why */ value FROM INPUT -- the batch", ("value",)),
    ],
)
def test_a_query_that_only_selects_columns_of_the_batch_is_a_projection(
    sql: str, columns: tuple[str, ...]
) -> None:
    assert projected_columns(sql, COLUMNS) == columns


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT KEY, value FROM input",  # Spark names the column KEY: not the sink's key
        "SELECT key AS k, value FROM input",
        "SELECT key value FROM input",
        "SELECT upper(key), value FROM input",
        "SELECT key, value FROM input WHERE offset > 3",
        "SELECT DISTINCT key, value FROM input",
        "SELECT key, key, value FROM input",
        "SELECT key,, value FROM input",
        "SELECT key, value FROM orders",
        "SELECT key, value, extra FROM input",
        "SELECT 'value' FROM input",
        "SELECT key, value FROM input LIMIT 3",
        "WITH t AS (SELECT * FROM input) SELECT * FROM t",
        "SELECT * FROM input; SELECT * FROM input",
        "SELECT value FROM input /* open",
        "",
    ],
)
def test_anything_else_is_not_a_projection(sql: str) -> None:
    assert projected_columns(sql, COLUMNS) is None


@given(st.text(max_size=80))
def test_a_projection_names_only_available_columns_once(sql: str) -> None:
    columns = projected_columns(sql, COLUMNS)
    assert columns is None or (set(columns) <= set(COLUMNS) and len(set(columns)) == len(columns))
