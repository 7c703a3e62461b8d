"""What a `transform.sql` may be: one query, and nothing that reaches past the batch.

The coordinator has no Spark, so this is a conservative tokenizer rather than Spark's parser:
it drops comments (`--`, nested `/* */`) and string literals ('…', "…", r'…'), keeps
back-quoted identifiers whole, and then looks at the words. It refuses what is not a single
query: a statement that does not start as a query does (SELECT, WITH, VALUES, FROM, TABLE
or a parenthesis), the statement after a WITH's common table expressions when it is not a
query, an INSERT anywhere (`FROM t INSERT INTO …` is Spark's multi-insert), several
statements (a `;` followed by more), a file read as a table (`parquet.\u0060/etc\u0060`,
with `spark.sql.runSQLOnFiles`), and the functions that call Java methods (`reflect`,
`java_method`, `try_reflect`: they would read the executor's environment). The executor
checks the same spec with this module, and then parses the query with Spark's own parser
(`lockgate.executor.dataplane.spark.transform`) to check that it reads only its batch's views.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

#: Words a query may start with (after any opening parentheses).
QUERY_STARTS = ("SELECT", "WITH", "VALUES", "FROM", "TABLE")
#: Built-in functions that call static Java methods with the caller's arguments.
JAVA_CALLS = frozenset({"REFLECT", "JAVA_METHOD", "TRY_REFLECT"})
#: Spark data sources a `source.\u0060path\u0060` table name reads a file (or more) with.
FILE_SOURCES = frozenset(
    {
        "AVRO",
        "BINARYFILE",
        "CSV",
        "DELTA",
        "HIVE",
        "IMAGE",
        "JDBC",
        "JSON",
        "LIBSVM",
        "ORC",
        "PARQUET",
        "TEXT",
        "XML",
        "LOCKGATE_KAFKA",
        "LOCKGATE_KAFKA_SINK",
    }
)
_FIX = (
    "write one query over the batch's views, e.g. `SELECT key, value FROM input`: no SET or"
    " RESET, no DDL (CREATE, DROP, ALTER, CACHE, ...), no INSERT, ADD JAR/FILE or LOAD, no"
    " second statement, no file paths"
)


@dataclass(frozen=True)
class SqlProblem:
    """Why a `transform.sql` is refused, and how to fix it."""

    description: str
    fix: str = _FIX


@dataclass(frozen=True)
class _Token:
    kind: str  # "word" (upper-cased), "quoted" (a back-quoted identifier), "string", "punct"
    text: str
    #: A word as written (its case kept).
    written: str = field(default="", compare=False)


class _Unterminated(ValueError):
    pass


def sql_transform_problem(sql: str) -> SqlProblem | None:
    """None when `sql` reads as one query that stays inside the batch; otherwise why not."""
    try:
        tokens = _tokens(sql)
    except _Unterminated as exc:
        return SqlProblem(f"has an unterminated {exc}", "close it")
    while tokens and tokens[-1].text == ";":
        tokens.pop()  # Spark accepts trailing semicolons after one statement
    if not tokens:
        return SqlProblem("is empty", "write a query, e.g. `SELECT key, value FROM input`")
    if any(t.kind == "punct" and t.text == ";" for t in tokens):
        return SqlProblem("holds more than one statement (a `;` separates them)")
    words = [t for t in tokens if t.kind != "punct" or t.text != "("]
    first = words[0].text if words and words[0].kind == "word" else ""
    if first not in QUERY_STARTS:
        return SqlProblem(f"{_statement_name(words)}, not a query")
    main = _main_statement(tokens) if first == "WITH" else first
    if main not in QUERY_STARTS:
        after = f"`{main}` statement" if main else "no statement"
        return SqlProblem(f"has {after} after its WITH clause, not a query")
    return _insert_problem(tokens) or _path_problem(tokens) or _java_problem(tokens)


def projected_columns(sql: str, available: Sequence[str]) -> tuple[str, ...] | None:
    """The columns of the batch's view a `transform.sql` only selects, in order, when it is
    `SELECT <columns> FROM input` (or `SELECT * FROM input`, every column of `available`):
    no expression, alias, filter, DISTINCT or other view. None for any other query.

    Such a query changes no record, so the executor can run its batch without Spark's SQL
    engine (chained, selecting the columns itself). A column must be written as its own
    lower-case name (Spark would name `SELECT KEY` "KEY", which the sink does not take as the
    key) and at most once; anything unsure is None, which runs the query in Spark.
    """
    try:
        tokens = _tokens(sql)
    except _Unterminated:
        return None
    while tokens and tokens[-1].text == ";":
        tokens.pop()
    if len(tokens) < 4 or tokens[0] != _Token("word", "SELECT"):
        return None
    *listed, from_word, view = tokens[1:]
    if from_word != _Token("word", "FROM") or view.text.upper() != "INPUT":
        return None
    if view.kind not in ("word", "quoted"):
        return None
    if [t.text for t in listed] == ["*"]:
        return tuple(available)
    names = [t.written if t.kind == "word" else t.text for t in listed[0::2]]
    separators = listed[1::2]
    if len(listed) % 2 == 0 or any(t != _Token("punct", ",") for t in separators):
        return None
    if any(t.kind not in ("word", "quoted") for t in listed[0::2]):
        return None
    if any(name not in available for name in names) or len(set(names)) != len(names):
        return None
    return tuple(names)


def _statement_name(tokens: list[_Token]) -> str:
    if not tokens:
        return "holds only parentheses"
    if tokens[0].kind != "word":
        return f"starts with `{tokens[0].text or 'a string'}`"
    words = [t.text for t in tokens[:2] if t.kind == "word"]
    name = " ".join(words) if words[0] == "ADD" else words[0]
    return f"is a `{name}` statement"


def _main_statement(tokens: list[_Token]) -> str:
    """The word a WITH's statement goes on with after its common table expressions: each is
    `name [(columns)] [AS] (query)`, separated by commas."""
    depth = 0
    after_close = False
    for token in tokens[1:]:
        if token.kind == "punct" and token.text == "(":
            depth += 1
        elif token.kind == "punct" and token.text == ")":
            depth -= 1
            after_close = depth == 0
            continue
        elif depth == 0 and after_close:
            if token.text in ("AS", ","):
                after_close = False
                continue
            return token.text if token.kind == "word" else ""
        if depth == 0 and token.kind == "punct" and token.text == ",":
            after_close = False
    return ""


def _insert_problem(tokens: list[_Token]) -> SqlProblem | None:
    if any(t.kind == "word" and t.text == "INSERT" for t in tokens):
        return SqlProblem("writes with INSERT; a transform is a query, its output the sink's")
    return None


def _path_problem(tokens: list[_Token]) -> SqlProblem | None:
    """`source.\u0060path\u0060`: Spark reads the file at `path` with the data source `source`."""
    for before, dot, after in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if dot.text != "." or after.kind != "quoted" or before.kind not in ("word", "quoted"):
            continue
        source = before.text.upper()
        if source in FILE_SOURCES or any(c in after.text for c in "/\\:"):
            return SqlProblem(
                f"reads a file as a table ({before.text}.`{after.text}`); a transform reads"
                " only its batch",
                "read from the view `input` (or one named after a source topic)",
            )
    return None


def _java_problem(tokens: list[_Token]) -> SqlProblem | None:
    for name, paren in itertools.pairwise(tokens):
        if name.kind == "word" and name.text in JAVA_CALLS and paren.text == "(":
            return SqlProblem(
                f"calls {name.text.lower()}(), which runs Java methods on the executor",
                "use Spark SQL's built-in functions",
            )
    return None


def _tokens(sql: str) -> list[_Token]:
    """Words, back-quoted identifiers, string placeholders and punctuation, without
    comments; `_Unterminated` names a comment, string or identifier left open."""
    tokens: list[_Token] = []
    i, n = 0, len(sql)
    while i < n:
        char = sql[i]
        if char.isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
        elif char in "'\"":
            # r'...' is a raw literal: its backslashes escape nothing.
            raw = _adjacent(sql, i) and bool(tokens) and tokens[-1] == _Token("word", "R")
            if raw:
                tokens.pop()
            i = _skip_string(sql, i, raw=raw)
            tokens.append(_Token("string", ""))
        elif char == "`":
            text, i = _quoted_identifier(sql, i)
            tokens.append(_Token("quoted", text))
        elif char.isalnum() or char == "_":
            start = i
            while i < n and (sql[i].isalnum() or sql[i] in "_$"):
                i += 1
            tokens.append(_Token("word", sql[start:i].upper(), sql[start:i]))
        else:
            tokens.append(_Token("punct", char))
            i += 1
    return tokens


def _adjacent(sql: str, i: int) -> bool:
    """Whether the quote at `i` follows its `r` prefix directly (a raw string literal)."""
    return i > 0 and sql[i - 1] in "rR"


def _skip_block_comment(sql: str, i: int) -> int:
    depth = 0
    while i < len(sql):
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise _Unterminated("/* comment")


def _skip_string(sql: str, i: int, *, raw: bool) -> int:
    quote = sql[i]
    i += 1
    while i < len(sql):
        if sql[i] == "\\" and not raw:
            i += 2
        elif sql[i] == quote:
            return i + 1
        else:
            i += 1
    raise _Unterminated("string literal")


def _quoted_identifier(sql: str, i: int) -> tuple[str, int]:
    text: list[str] = []
    i += 1
    while i < len(sql):
        if sql.startswith("``", i):
            text.append("`")
            i += 2
        elif sql[i] == "`":
            return "".join(text), i + 1
        else:
            text.append(sql[i])
            i += 1
    raise _Unterminated("back-quoted identifier")
