"""An explicit ``CAST`` to an integer means the same on every runner: a
fraction truncates toward zero, and text must be an integer.

Spark, Flink and Java's narrowing cast truncate ``CAST(2.7 AS BIGINT)`` to 2;
DuckDB rounds half away from zero (3). headwater keeps one meaning, Spark's and
Flink's, as it does for a fraction stored in an integer sink column
(:mod:`headwater.sql.execute.sink_types`): the planner writes ``CAST(x AS
BIGINT)`` (``INT``, ``SMALLINT``, ``TINYINT``...; ``TRY_CAST`` too) of a
``DOUBLE``, ``FLOAT`` or ``DECIMAL`` ``x`` as ``CAST(TRUNC(x) AS BIGINT)``
(TRUNC keeps NULL; -2.7 is -2), which the bounded query, both streaming paths
and Spark all run (sqlglot writes Spark's ``TRUNC`` as its truncating cast).

Text into an integer: DuckDB reads ``'1.5'`` as 2, ``'1e2'`` as 100 and ``'0x10'``
as 16, where Spark (ANSI) and Flink accept only an integer's digits. The planner
keeps theirs: ``TRY_CAST(s AS INT)`` of a text ``s`` is written ``CASE WHEN
REGEXP_LIKE(TRIM(s), '^[+-]?[0-9]+$') THEN TRY_CAST(TRIM(s) AS INT) END`` (NULL
for any other text, on every runner), and ``CAST(s AS INT)`` casts ``'not an
integer: ' || s`` for other text, so every runner fails on it, naming the value.

``x``'s type comes from the query's text alone (planning never reads data):
sqlglot's type annotation of ``x``, each column read as the type of the
column of that name in the query's tables or in the output of the query's
subqueries and CTEs (innermost first). An integer ``x`` is cast as written.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from headwater.sql.plan.catalog import Table

T = exp.DataType.Type
#: The integer types a cast truncates into.
INTEGERS = frozenset(exp.DataType.INTEGER_TYPES - {T.BIT})
#: The types of fractions (rounded by DuckDB's cast to an integer).
FRACTIONS = frozenset(exp.DataType.REAL_TYPES)
#: Text types (DuckDB's cast reads fractions, exponents and hex in them).
TEXTS = frozenset(exp.DataType.TEXT_TYPES)
#: The text of an integer, as Spark and Flink read it (around blanks).
INTEGER_TEXT = "^[+-]?[0-9]+$"


def truncating_casts(query: exp.Expression, tables: Iterable[Table]) -> exp.Expression:
    """``query`` with each cast of a fraction to an integer type truncating (a
    copy; ``query`` itself when it has no such cast)."""
    if not any(_to_integer(c) for c in query.find_all(exp.Cast)):
        return query
    query = query.copy()
    types = _table_types(tables)
    selects = list(query.find_all(exp.Select))
    for select in reversed(selects):  # breadth first, reversed: inner queries first
        for cast in list(select.find_all(exp.Cast)):
            if not _to_integer(cast) or _scope(cast) is not select or _guarded(cast):
                continue
            kind = _type_of(cast.this, types).this
            if kind in FRACTIONS:
                cast.set("this", exp.Trunc(this=cast.this))
            elif kind in TEXTS:
                _integer_text(cast)
        for item in select.expressions:
            _learn(types, item.alias_or_name.lower(), _type_of(item, types))
    return query


def _to_integer(cast: exp.Cast) -> bool:
    return cast.to.this in INTEGERS and not isinstance(cast.this, exp.Trunc)


def _is_integer_text(text: exp.Expression) -> exp.Expression:
    return exp.RegexpLike(
        this=exp.Trim(this=text.copy()), expression=exp.Literal.string(INTEGER_TEXT)
    )


def _integer_text(cast: exp.Cast) -> None:
    """Rewrite a cast of text to an integer (in place) to accept only an integer's
    digits: a TRY_CAST gives NULL for other text, a CAST fails naming the value."""
    text = cast.this
    check = _is_integer_text(text)
    if isinstance(cast, exp.TryCast):
        guarded = exp.Case(ifs=[exp.If(this=check, true=cast.copy())])
        guarded.args["ifs"][0].args["true"].set("this", exp.Trim(this=text.copy()))
        cast.replace(guarded)
        return
    failing = exp.DPipe(this=exp.Literal.string("not an integer: "), expression=text.copy())
    cast.set(
        "this",
        exp.Case(ifs=[exp.If(this=check, true=exp.Trim(this=text.copy()))], default=failing),
    )


def _guarded(cast: exp.Cast) -> bool:
    """Whether ``cast`` is already one :func:`_integer_text` wrote (planning a
    query's stage again must not wrap it twice)."""
    ifs = [cast.parent] if isinstance(cast.parent, exp.If) else []
    if isinstance(cast.this, exp.Case):
        ifs += cast.this.args.get("ifs") or []
    return any(
        isinstance(branch.this, exp.RegexpLike) and branch.this.expression.name == INTEGER_TEXT
        for branch in ifs
    )


def _scope(node: exp.Expression) -> exp.Select | None:
    """The SELECT whose columns ``node`` reads."""
    return node.find_ancestor(exp.Select)


def _type_of(node: exp.Expression, types: dict[str, exp.DataType | None]) -> exp.DataType:
    """``node``'s SQL type, each column typed by name (UNKNOWN where sqlglot
    cannot tell)."""
    probe = exp.Paren(this=node.copy())
    for column in list(probe.find_all(exp.Column)):
        known = types.get(column.name.lower())
        if known is not None:
            column.replace(exp.Cast(this=exp.null(), to=known.copy()))
    return annotate_types(probe, dialect="duckdb").this.type or exp.DataType.build("UNKNOWN")


def _table_types(tables: Iterable[Table]) -> dict[str, exp.DataType | None]:
    """Column name (lower case) -> its SQL type; None where tables disagree."""
    types: dict[str, exp.DataType | None] = {}
    for table in tables:
        for name, arrow in table.arrow_types().items():
            _learn(types, name.lower(), _sql_type(arrow))
    return types


def _learn(types: dict[str, exp.DataType | None], name: str, found: exp.DataType) -> None:
    """Record ``name``'s type; a name of two types (or of none) is unknown."""
    if not name:
        return
    if found.this is T.UNKNOWN or (name in types and types[name] != found):
        types[name] = None
    else:
        types[name] = found


def _sql_type(arrow: pa.DataType) -> exp.DataType:
    if pa.types.is_floating(arrow):
        return exp.DataType.build("FLOAT" if arrow.bit_width == 32 else "DOUBLE")
    if pa.types.is_decimal(arrow):
        return exp.DataType.build(f"DECIMAL({arrow.precision}, {arrow.scale})")
    if pa.types.is_integer(arrow):
        return exp.DataType.build("BIGINT")
    if pa.types.is_boolean(arrow):
        return exp.DataType.build("BOOLEAN")
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return exp.DataType.build("VARCHAR")
    return exp.DataType.build("UNKNOWN")
