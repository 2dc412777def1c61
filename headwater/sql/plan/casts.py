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
sqlglot's type annotation of ``x``, a column qualified by a table's name or
alias read as that table's column, any other as the column of that name in
the query's tables or in the output of its subqueries and CTEs (innermost
first), and the text functions sqlglot leaves untyped (REPLACE, SPLIT_PART,
REGEXP_EXTRACT...) as text. An integer ``x`` is cast as written. Where the
type stays unknown and ``x`` may be text (it reads a column that is text in
some table or subquery), no one rewrite is right for text and for a fraction
alike (and DuckDB's own cast would silently read ``'1.5'`` as 2), so the
planner refuses the cast, naming it and the explicit inner cast that tells
the type.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from headwater.sql.errors import SqlError, position
from headwater.sql.parse.dialect import WindowTVF
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
#: Functions of text that return text, which sqlglot leaves untyped.
TEXT_FUNCTIONS = (
    exp.Replace,
    exp.RegexpReplace,
    exp.RegexpExtract,
    exp.SplitPart,
    exp.Pad,
    exp.Left,
    exp.Right,
    exp.JSONExtractScalar,
)
UNKNOWN = exp.DataType.build("UNKNOWN")
#: The columns a windowing table function adds to its table's (either spelling).
WINDOW_COLUMNS = {
    n: exp.DataType.build("TIMESTAMP")
    for n in ("window_start", "window_end", "window_time", "wstart", "wend")
}
VARCHAR = exp.DataType.build("VARCHAR")


class _Types:
    """What the planner knows of the query's column types: by name (None where
    two differ), by table, by the output of each subquery, and the names that
    are text somewhere."""

    def __init__(self, tables: Iterable[Table], query: exp.Expression) -> None:
        self.by_name: dict[str, exp.DataType | None] = {}
        self.by_table: dict[str, dict[str, exp.DataType]] = {}
        self.outputs: dict[int, dict[str, exp.DataType]] = {}
        self.texts: set[str] = set()
        self.ctes = {c.alias_or_name.lower(): c.this for c in query.find_all(exp.CTE)}
        for table in tables:
            mine = {n.lower(): _sql_type(a) for n, a in table.arrow_types().items()}
            self.by_table[table.name.lower()] = mine
            for name, found in mine.items():
                self.learn(name, found)

    def learn(self, name: str, found: exp.DataType) -> None:
        """Record ``name``'s type; a name of two types (or of none) is unknown."""
        if not name:
            return
        if found.this in TEXTS:
            self.texts.add(name)
        if found.this is T.UNKNOWN or (name in self.by_name and self.by_name[name] != found):
            self.by_name[name] = None
        else:
            self.by_name[name] = found

    def of_column(self, column: exp.Column, scope: Scope) -> exp.DataType | None:
        """``column``'s type: the column of the source it names, or of the one
        source of the innermost scope that has it, else by name alone."""
        name = column.name.lower()
        found = scope.lookup(column.table.lower(), name)
        return found if found is not None else self.by_name.get(name)

    def of_source(self, source: exp.Expression) -> dict[str, exp.DataType] | None:
        """The column types of a FROM or JOIN source, None where not known."""
        if isinstance(source, WindowTVF):
            inner = self.of_source(source.this)
            return None if inner is None else inner | WINDOW_COLUMNS
        if isinstance(source, exp.Table):
            defined = self.ctes.get(source.name.lower())
            if defined is not None:
                return self.of_query(defined)
            return self.by_table.get(source.name.lower())
        if isinstance(source, exp.Subquery):
            return self.of_query(source.this)
        return None

    def of_query(self, query: exp.Expression) -> dict[str, exp.DataType] | None:
        """The output column types of a SELECT or set operation already typed
        (a set operation's column keeps a type only where its branches agree)."""
        if isinstance(query, exp.SetOperation):
            left, right = self.of_query(query.this), self.of_query(query.expression)
            if left is None or right is None:
                return None
            return {n: t for n, t in left.items() if right.get(n) == t}
        return self.outputs.get(id(query))

    def may_be_text(self, node: exp.Expression) -> bool:
        """Whether ``node`` reads a column that is text in some table or subquery."""
        return any(c.name.lower() in self.texts for c in node.find_all(exp.Column))


@dataclass(frozen=True)
class Scope:
    """The sources a SELECT reads, by name or alias, within the scopes around it:
    SQL resolves a column in the innermost scope that has it."""

    sources: dict[str, dict[str, exp.DataType]]
    outer: Scope | None = None

    def lookup(self, source: str, name: str) -> exp.DataType | None:
        """``name``'s type in ``source`` (or, unqualified, in the one source of the
        innermost scope that has it); None where ambiguous or unknown."""
        if source:
            if source in self.sources:
                return self.sources[source].get(name)
            return self.outer.lookup(source, name) if self.outer else None
        having = [cols[name] for cols in self.sources.values() if name in cols]
        if len(having) == 1:
            return having[0]
        if having or self.outer is None:
            return None
        return self.outer.lookup(source, name)


def truncating_casts(query: exp.Expression, tables: Iterable[Table]) -> exp.Expression:
    """``query`` with each cast of a fraction to an integer type truncating (a
    copy; ``query`` itself when it has no such cast)."""
    if not any(_to_integer(c) for c in query.find_all(exp.Cast)):
        return query
    query = query.copy()
    types = _Types(tables, query)
    tops = [s for s in query.find_all(exp.Select) if _scope(s) is None]
    for select in sorted(tops, key=lambda s: s.find_ancestor(exp.CTE) is None):  # CTEs first
        _type_select(select, types, None)
    return query


def _type_select(select: exp.Select, types: _Types, outer: Scope | None) -> None:
    """Rewrite the casts of ``select`` and of the queries in it, and record its
    output types. Its sources (CTEs, FROM and JOIN subqueries, which see no outer
    scope) are typed first; then the subqueries that read its columns
    (correlated, in its WHERE, SELECT list or a LATERAL), with its scope around."""
    inner = [s for s in select.find_all(exp.Select) if _scope(s) is select]
    reading = [s for s in inner if _reads_scope(s, select)]
    for child in sorted(set(inner) - set(reading), key=inner.index):
        _type_select(child, types, None)
    for child in reading:
        _type_select(child, types, Scope(_sources(select, types), outer))
    scope = Scope(_sources(select, types), outer)  # a LATERAL's output typed by now
    for cast in list(select.find_all(exp.Cast)):
        if not _to_integer(cast) or _scope(cast) is not select or _guarded(cast):
            continue
        kind = _type_of(cast.this, types, scope).this
        if kind in FRACTIONS:
            cast.set("this", exp.Trunc(this=cast.this))
        elif kind in TEXTS:
            _integer_text(cast)
        elif kind is T.UNKNOWN and types.may_be_text(cast.this):
            _refuse(cast)
    types.outputs[id(select)] = _output_types(select, types, scope)
    for name, found in types.outputs[id(select)].items():
        types.learn(name, found)


def _sources(select: exp.Select, types: _Types) -> dict[str, dict[str, exp.DataType]]:
    """The column types of each source ``select`` reads (those known so far), by
    its name or alias (lower case)."""
    first = select.args.get("from_") or select.args.get("from")  # sqlglot 30 names it from_
    found = {}
    for source in [first, *(select.args.get("joins") or [])]:
        if source is None:
            continue
        inner = source.this.this if isinstance(source.this, exp.Lateral) else source.this
        columns = types.of_source(inner)
        if columns is not None:
            found[source.this.alias_or_name.lower() or inner.alias_or_name.lower()] = columns
    return found


def _reads_scope(child: exp.Select, select: exp.Select) -> bool:
    """Whether ``child`` (a SELECT directly in ``select``) may read ``select``'s
    sources: not when it is one of them (a CTE's body, a FROM or JOIN subquery),
    unless LATERAL."""
    node: exp.Expression = child
    while node.parent is not select:
        if isinstance(node, exp.Lateral):
            return True
        node = node.parent
    return node.arg_key not in ("with", "from", "from_", "joins")


def _output_types(select: exp.Select, types: _Types, scope: Scope) -> dict[str, exp.DataType]:
    """``select``'s output columns and their types (``*`` as its sources' columns)."""
    out: dict[str, exp.DataType] = {}
    for item in select.expressions:
        if isinstance(item, exp.Star):
            for columns in scope.sources.values():
                out |= columns
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            out |= scope.sources.get(item.table.lower(), {})
        else:
            out[item.alias_or_name.lower()] = _type_of(item, types, scope)
    return out


def _refuse(cast: exp.Cast) -> None:
    name = "TRY_CAST" if isinstance(cast, exp.TryCast) else "CAST"
    operand, target = cast.this.sql(), cast.to.sql()
    line, col = position(cast)
    raise SqlError(
        f"{name}({operand} AS {target}): the planner cannot tell whether {operand} is "
        "text or a number, and text and fractions become integers differently",
        line,
        col,
        f"Qualify a column by its table, or say which: {name}(CAST({operand} AS VARCHAR) "
        f"AS {target}) for text (only an integer's digits are one), or "
        f"{name}(CAST({operand} AS DOUBLE) AS {target}) for a number (a fraction truncates)",
    )


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


def _type_of(node: exp.Expression, types: _Types, scope: Scope) -> exp.DataType:
    """``node``'s SQL type, each column typed by its table or name (UNKNOWN where
    neither sqlglot nor :data:`TEXT_FUNCTIONS` tell)."""
    probe = exp.Paren(this=node.copy())
    for column in list(probe.find_all(exp.Column)):
        known = types.of_column(column, scope)
        if known is not None:
            column.replace(exp.Cast(this=exp.null(), to=known.copy()))
    typed = annotate_types(probe, dialect="duckdb").this
    inner = typed.unalias() if isinstance(typed, exp.Alias) else typed
    if (typed.type is None or typed.type.this is T.UNKNOWN) and isinstance(inner, TEXT_FUNCTIONS):
        return VARCHAR
    return typed.type or UNKNOWN


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
    if pa.types.is_timestamp(arrow):
        return exp.DataType.build("TIMESTAMP")
    if pa.types.is_date(arrow):
        return exp.DataType.build("DATE")
    return exp.DataType.build("UNKNOWN")
