"""An INSERT's result columns against the sink's declared column types.

SQL's store assignment casts a value to its column's type; Flink refuses an
INSERT whose types differ. headwater casts where the cast keeps every value
(a wider integer, a float from an integer, any value as text, a date as a
timestamp), so that every sink (DuckDB, PostgreSQL, files, Kafka, Delta) and
both runners receive the declared types. A fraction stored in an integer
column (``AVG(price)``, a DOUBLE, into a BIGINT: NEXMark q4 and q17) is
truncated toward zero, as Flink (Java's narrowing cast; its AVG of integers is
the truncated quotient) and Spark's ``CAST(double AS BIGINT)`` do, and not
rounded as DuckDB's CAST would: the projection is ``CAST(TRUNC(x) AS BIGINT)``
(-2.5 is stored as -2). Where the cast can lose information otherwise (text
that may not parse, a timestamp's time of day, a narrower decimal), the INSERT
is refused before running, at the result column: the fix is the user's
explicit ``CAST(... AS type)``, which says how much to lose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from headwater.sql.errors import SqlError, position

T = exp.DataType.Type
_INTEGERS = {T.TINYINT: 1, T.SMALLINT: 2, T.INT: 3, T.BIGINT: 4, T.INT128: 5}
#: the decimal digits each integer rank needs
_DIGITS = {1: 3, 2: 5, 3: 10, 4: 19, 5: 39}
_FLOATS = {T.FLOAT: 1, T.DOUBLE: 2}
_TEXT = {T.TEXT, T.VARCHAR, T.CHAR, T.NCHAR, T.NVARCHAR}
_TIMESTAMPS = {T.TIMESTAMP, T.TIMESTAMPNTZ, T.TIMESTAMP_S, T.TIMESTAMP_MS, T.TIMESTAMP_NS}
_ZONED = {T.TIMESTAMPTZ, T.TIMESTAMPLTZ}
#: DuckDB's result types as SQL types them (a SUM of integers is BIGINT in SQL and Spark)
_AS_SQL = {"HUGEINT": "BIGINT", "UHUGEINT": "BIGINT"}


@dataclass(frozen=True)
class Kind:
    """A type's family (``integer``, ``float``, ``decimal``, ``text``, ``boolean``,
    ``date``, ``timestamp``, ``timestamptz``; ``other``: not checked), its rank
    within it (an integer's width, a float's) and a decimal's precision and scale."""

    family: str
    rank: int = 0
    precision: int = 0
    scale: int = 0


def kind_of(sql_type: str, dialect: str | None = None) -> Kind:
    try:
        t = exp.DataType.build(_AS_SQL.get(sql_type.upper(), sql_type), dialect=dialect)
    except Exception:  # noqa: BLE001 - a type sqlglot does not read is not checked
        return Kind("other")
    if t.this in _INTEGERS:
        return Kind("integer", _INTEGERS[t.this])
    if t.this in _FLOATS:
        return Kind("float", _FLOATS[t.this])
    if t.this == T.DECIMAL:
        params = [int(e.name) for e in t.expressions if e.name.isdigit()]
        precision, scale = (params + [18, 3][len(params) :])[:2]
        return Kind("decimal", precision=precision, scale=scale)
    families = [
        ("text", _TEXT),
        ("timestamp", _TIMESTAMPS),
        ("timestamptz", _ZONED),
        ("date", {T.DATE}),
        ("boolean", {T.BOOLEAN}),
    ]
    return next((Kind(name, 0) for name, types in families if t.this in types), Kind("other"))


def loss(given: Kind, declared: Kind) -> str | None:
    """Why storing ``given`` as ``declared`` can lose information (None: it cannot)."""
    if "other" in (given.family, declared.family) or declared.family == "text":
        return None
    if given.family == declared.family:
        return _narrower(given, declared)
    safe = {
        ("integer", "float"),
        ("float", "integer"),  # a fraction truncated toward zero: truncates()
        ("decimal", "integer"),
        ("decimal", "float"),
        ("boolean", "integer"),
        ("date", "timestamp"),
        ("date", "timestamptz"),
        ("timestamp", "timestamptz"),  # an instant either way: stored as it is
        ("timestamptz", "timestamp"),
    }
    if (given.family, declared.family) in safe:
        return None
    if (given.family, declared.family) == ("integer", "decimal"):
        room = declared.precision - declared.scale
        return None if room >= _DIGITS[given.rank] else "can overflow it"
    if given.family == "text":
        return "is text, which may not parse as one"
    if (given.family, declared.family) in (("timestamp", "date"), ("timestamptz", "date")):
        return "drops the time of day"
    return "is another kind of value"


def _narrower(given: Kind, declared: Kind) -> str | None:
    """A narrower decimal loses digits. Integers and floats are carried 64 bits
    wide whatever their source declares (an ``INT`` column's values are BIGINT
    here), so a narrower integer or float column is no loss of the type: its
    values are stored as they are, as before."""
    if given.family != "decimal":
        return None
    if declared.scale < given.scale:
        return "drops digits of the fraction"
    whole = declared.precision - declared.scale >= given.precision - given.scale
    return None if whole else "can overflow it"


def truncates(given: Kind, declared: Kind) -> bool:
    """Whether a fraction is stored in an integer column: truncated toward zero
    (Flink's and Spark's narrowing cast), not rounded (DuckDB's CAST)."""
    return declared.family == "integer" and given.family in ("float", "decimal")


def needs_cast(given: Kind, declared: Kind) -> bool:
    """Whether the values change representation (a number of another family, a
    wider one, a boolean as an integer); times and text are stored as they are."""
    if "other" in (given.family, declared.family) or declared.family == "text":
        return False
    if given == declared:
        return False
    if given.family == declared.family:
        return given.family == "decimal" or declared.rank > given.rank
    return given.family in ("integer", "float", "decimal", "boolean")


def fit_to_sink(
    query: exp.Expression,
    result: list[tuple[str, str]],
    declared: Mapping[str, str],
    sink: str,
) -> exp.Expression:
    """``query`` (an INSERT's, whose result columns and DuckDB types are ``result``)
    with its columns cast to the sink's ``declared`` types and named as the sink's
    columns (by position: ``COUNT(*)`` fills the column declared there, not one
    named ``count_star()``), or the same query when both already are; SqlError
    where a cast can lose information."""
    names = list(declared)
    if len(result) != len(names):
        return query
    items = query.expressions if isinstance(query, exp.Select) else []
    casts: dict[int, tuple[str, bool]] = {}
    for i, ((_, given), column) in enumerate(zip(result, names, strict=True)):
        g, d = kind_of(given, "duckdb"), kind_of(declared[column])
        why = loss(g, d)
        if why is not None:
            shown = items[i].unalias().sql() if i < len(items) else f"column {i + 1}"
            raise SqlError(
                f"{shown} is {given}; storing it in {sink}.{column} ({declared[column]}) {why}",
                *position(items[i] if i < len(items) else query),
                f"Say how to convert it: CAST({shown} AS {declared[column]})",
            )
        if truncates(g, d):  # carried 64 bits wide, as every integer (see _narrower)
            casts[i] = ("BIGINT" if d.rank <= _INTEGERS[T.BIGINT] else declared[column], True)
        elif needs_cast(g, d):
            casts[i] = (declared[column], False)
    if not casts:
        return _renamed(query, [name for name, _ in result], names)
    if not isinstance(query, exp.Select) or any(item.is_star for item in items):
        at = next(iter(casts))
        raise SqlError(
            f"result column {at + 1} is {result[at][1]} and {sink}.{names[at]} is "
            f"{declared[names[at]]}: a SELECT * or set operation is not cast to the sink's types",
            *position(query),
            f"List the columns and CAST(... AS {declared[names[at]]}) this one",
        )
    return _cast_in_place(query, names, casts) or _projected(query, names, casts)


def _cast_in_place(
    query: exp.Select, names: list[str], casts: dict[int, tuple[str, bool]]
) -> exp.Select | None:
    """``query`` with each cast made on its own item (``AVG(price) AS avg_price``
    becomes ``CAST(TRUNC(AVG(price)) AS BIGINT) AS avg_price``), so that a windowed
    or keyed aggregate keeps its own shape (the fast path takes a SELECT of
    aggregates from the stream; :func:`_projected`'s SELECT over it is not one).
    Only when that changes nothing else: every result column already has its sink
    column's name, each cast item is an aggregate (not a group key, not a window
    function), and no clause names one of them (GROUP BY, HAVING, ORDER BY or
    QUALIFY would read the cast value). None: :func:`_projected` instead."""
    items = query.expressions
    cast_names = {names[i].lower() for i in casts}
    if [item.alias_or_name for item in items] != names:
        return None
    for i in casts:
        if not isinstance(items[i], exp.Alias) or items[i].find(exp.AggFunc) is None:
            return None
        if items[i].find(exp.Window) is not None:
            return None
    for column in query.find_all(exp.Column):
        if not column.table and column.name.lower() in cast_names:
            return None
    fitted = query.copy()
    for i, (to, truncate) in casts.items():
        value = fitted.expressions[i].this
        value = exp.cast(exp.Trunc(this=value.copy()) if truncate else value.copy(), to)
        fitted.expressions[i].set("this", value)
    return fitted


def _projected(
    query: exp.Select, names: list[str], casts: dict[int, tuple[str, bool]]
) -> exp.Select:
    """``SELECT CAST(c AS t) AS c, ... FROM (query) AS __sink``: the cast outside
    the query, so that its grouping and maintenance key stay as written; its
    EMIT, ORDER BY and LIMIT move out with the rows. A fraction into an integer
    is ``CAST(TRUNC(c) AS BIGINT)``: DuckDB's TRUNC, Spark's CAST to BIGINT (sqlglot's
    translation), both toward zero."""
    inner = query.copy()
    given = []
    for i, item in enumerate(inner.expressions):
        name = item.alias_or_name if isinstance(item, exp.Alias | exp.Column) else ""
        if not name:
            name = f"__c{i}"
            item.replace(exp.alias_(item.copy(), name, quoted=True))
        given.append(name)
    inner, outer = _outside(inner, given, names)
    for i, name in enumerate(given):
        value: exp.Expression = exp.column(name, quoted=True)
        if i in casts:
            to, truncate = casts[i]
            value = exp.cast(exp.Trunc(this=value) if truncate else value, exp.DataType.build(to))
        outer.select(exp.alias_(value, names[i], quoted=True), copy=False)
    sink = exp.TableAlias(this=exp.to_identifier("__sink"))
    return outer.from_(exp.Subquery(this=inner, alias=sink), copy=False)


def _renamed(query: exp.Expression, given: list[str], names: list[str]) -> exp.Expression:
    """``query`` with its result columns (named ``given``) named as the sink's
    ``names``: a SELECT of named items is projected as for a cast; a ``SELECT *``
    or set operation is read by its result names (unless two share one: then the
    sink gets them as the query names them)."""
    if given == names:
        return query
    items = query.expressions if isinstance(query, exp.Select) else []
    if items and not any(item.is_star for item in items):
        return _projected(query, names, {})
    if len(set(given)) != len(given):
        return query
    inner, outer = _outside(query, given, names)
    for name, declared in zip(given, names, strict=True):
        outer.select(exp.alias_(exp.column(name, quoted=True), declared, quoted=True), copy=False)
    sink = exp.TableAlias(this=exp.to_identifier("__sink"))
    return outer.from_(exp.Subquery(this=inner, alias=sink), copy=False)


def _outside(
    query: exp.Expression, given: list[str], names: list[str]
) -> tuple[exp.Expression, exp.Select]:
    """A copy of ``query`` and the SELECT to read it in: its EMIT, ORDER BY and
    LIMIT move out with the rows, an ORDER BY of a result column (``given``) by
    its sink column's name (``names``)."""
    inner = query.copy()
    outer = exp.Select()
    renames = {g.lower(): n for g, n in zip(given, names, strict=True)}

    def by_sink_name(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in renames:
            return exp.column(renames[node.name.lower()], quoted=True)
        return node

    for arg in ("emit", "order", "limit"):
        node = inner.args.get(arg)
        if node is not None:
            inner.set(arg, None)
            outer.set(arg, node.transform(by_sink_name) if arg == "order" else node)
    return inner, outer
