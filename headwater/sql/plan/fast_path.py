"""Which queries the windowed-aggregate fast path runs
(:mod:`headwater.sql.execute.aggregate_local`).

A query is a plain windowed aggregate over one stream when it is a single
SELECT from the stream or one windowing TVF over it (a session only when keyed
by its GROUP BY columns), grouped by the window bounds (or the raw event-time
column) and plain columns, with only ``COUNT``, ``SUM``, ``MIN``, ``MAX``,
``AVG`` (and ``COUNT(DISTINCT x)``) as aggregates.
:func:`analyze_shape` returns its :class:`Shape` or a sentence saying why not,
so that ``explain()`` and tests can tell a user which path a query takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from headwater.model.windows import GlobalWindows
from headwater.sql.parse.dialect import WindowTVF
from headwater.sql.plan.buckets import bucket_of
from headwater.sql.plan.catalog import Table
from headwater.sql.plan.keys.kinds import KeyKind
from headwater.sql.plan.planner import QueryPlan
from headwater.sql.plan.translate import window_names

#: The window-start column a bucket GROUP BY item is computed from.
BUCKET_START = "__hw_bucket_start"
#: The aggregates the fast path has combiners for.
AGGREGATES = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)


@dataclass(frozen=True)
class Shape:
    """A query the fast path runs: its stream, windows, clauses and aggregates."""

    stream: Table
    tvf: WindowTVF | None
    #: window column name -> "start" | "end" | "time"
    windows: dict[str, str]
    #: the plain GROUP BY columns (the stream's own names), in GROUP BY order
    group: tuple[str, ...]
    where: exp.Expression | None
    items: tuple[exp.Expression, ...]
    having: exp.Expression | None


def bare(node: exp.Expression) -> exp.Expression:
    """A copy of ``node`` with table qualifiers dropped (one table: no ambiguity)."""
    node = node.copy()
    for column in list(node.find_all(exp.Column)):
        column.set("table", None)
        column.set("db", None)
        column.set("catalog", None)
    return node


def why_not(plan: QueryPlan) -> str | None:
    """Why the fast path cannot run ``plan`` (None: it can)."""
    shape = analyze_shape(plan)
    return shape if isinstance(shape, str) else None


def analyze_shape(plan: QueryPlan) -> Shape | str:
    """The query's :class:`Shape`, or a sentence saying why it is not a plain
    windowed aggregate over one stream."""
    query = filters_as_cases(plan.group_query)
    if not plan.is_stream:
        return "it reads no stream"
    keyed = _keyed_by_columns(plan)
    problem = _structure_problem(plan, query, keyed)
    if problem:
        return problem
    assert isinstance(query, exp.Select)
    stream = plan.streams[0]
    source = query.args.get("from_")
    source = source.this if source is not None else None
    tvf = source if isinstance(source, WindowTVF) else None
    table = tvf.this if tvf is not None else source
    if not isinstance(table, exp.Table) or table.name.lower() != stream.name.lower():
        return "FROM is not the stream or one windowing table function over it"
    group = query.args.get("group")
    if group is None or not group.expressions:
        return "it has no GROUP BY"
    problem = _nested_problem(query)
    if problem:
        return problem
    columns = {c.lower(): c for c in stream.columns}
    windows: dict[str, str] = {}
    if tvf is not None:
        names = window_names(tvf)
        windows = dict(zip(names, ("start", "end", "time"), strict=False))
    buckets = _bucket_items(group, plan, stream) if tvf is None else []
    if buckets:
        windows[BUCKET_START] = "start"
        query = _bucketed(query, buckets, stream.event_time)
        group = exp.Group(expressions=[e for e in group.expressions if e not in buckets])
    lower_windows = {n.lower(): n for n in windows}
    plain = _group_columns(group, columns, lower_windows, stream, tvf, keyed or bool(buckets))
    if isinstance(plain, str):
        return plain
    problem = _session_problem(tvf, plain)
    if problem:
        return problem
    grouped = {p.lower() for p in plain} | set(lower_windows)

    where = query.args.get("where")
    where = where.this if where is not None else None
    if where is not None:
        if where.find(exp.AggFunc):
            return "WHERE has an aggregate"
        problem = _columns_problem(where, columns, lower_windows, None, "WHERE")
        if problem:
            return problem
    aliases = {
        e.alias.lower(): e.this for e in query.expressions if isinstance(e, exp.Alias) and e.alias
    }
    having = query.args.get("having")
    having = having.this if having is not None else None
    for part, what in [*((e, "SELECT") for e in query.expressions), (having, "HAVING")]:
        if part is None:
            continue
        problem = _item_problem(part, columns, lower_windows, grouped, aliases, what)
        if problem:
            return problem
    if having is not None:
        having = _resolve_aliases(having, aliases, grouped)
    return Shape(
        stream=stream,
        tvf=tvf,
        windows=windows,
        group=tuple(plain),
        where=bare(where) if where is not None else None,
        items=tuple(query.expressions),
        having=bare(having) if having is not None else None,
    )


def _structure_problem(plan: QueryPlan, query: exp.Expression, keyed: bool) -> str | None:
    """Why ``query`` is not one SELECT over the groups of one stream (None: it is);
    ``keyed``: its groups are the values of plain columns."""
    if not plan.group_mode and not keyed:
        return f"its groups are not windows or event times ({plan.key.describe()})"
    if len(plan.streams) != 1 or plan.tables:
        return "it reads more than one table"
    if not isinstance(query, exp.Select):
        return "it is not a single SELECT"
    for arg in ("with_", "joins", "laterals", "distinct", "qualify", "windows", "pivots"):
        if query.args.get(arg):
            return f"it has {arg.rstrip('_').upper()}"
    return None


def _nested_problem(query: exp.Select) -> str | None:
    """A subquery, window function or ``*`` (but ``COUNT(*)``) the combiners cannot
    take (None: none)."""
    for node in query.find_all(exp.Subquery, exp.Exists, exp.Window, exp.Star):
        if isinstance(node, exp.Star) and isinstance(node.parent, exp.Count):
            continue
        return f"it has {type(node).__name__.upper()}"
    if any(s is not query for s in query.find_all(exp.Select)):
        return "it has a subquery"
    return None


def filters_as_cases(query: exp.Expression) -> exp.Expression:
    """``query`` with each ``agg(x) FILTER (WHERE c)`` written ``agg(CASE WHEN c THEN
    x END)`` (``COUNT(*)``: of ``CASE WHEN c THEN 1 END``): the same value, since
    these aggregates skip NULLs and a row failing ``c`` (or where ``c`` is NULL)
    gives NULL, and a form the combiners take (a copy; ``query`` itself when it has
    no FILTER)."""
    filters = [f for f in query.find_all(exp.Filter) if isinstance(f.this, AGGREGATES)]
    if not filters:
        return query
    query = query.copy()
    for node in list(query.find_all(exp.Filter)):
        agg = node.this
        if not isinstance(agg, AGGREGATES) or not isinstance(node.expression, exp.Where):
            continue
        condition = node.expression.this
        arg = agg.this
        if isinstance(arg, exp.Star):
            arg = exp.Literal.number(1)
        target = arg.expressions[0] if isinstance(arg, exp.Distinct) else arg
        case = exp.Case(ifs=[exp.If(this=condition.copy(), true=target.copy())])
        rewritten = agg.copy()
        if isinstance(arg, exp.Distinct):
            rewritten.this.set("expressions", [case])
        else:
            rewritten.set("this", case)
        node.replace(rewritten)
    return query


def _bucket_items(group: exp.Group, plan: QueryPlan, stream: Table) -> list[exp.Expression]:
    """The GROUP BY items that are the query's key bucket of the stream's event time
    (``DATE_FORMAT(dateTime, 'yyyy-MM-dd')`` in a query keyed by the day): the
    model's tumbling window of the bucket's size, so the item is the same for
    every row of a group, and its value is the item of the window's start."""
    if plan.key.kind is not KeyKind.BUCKET or not stream.event_time:
        return []
    found = []
    for item in group.expressions:
        bucket = None if isinstance(item, exp.Column) else bucket_of(item)
        if bucket is None or bucket[0] != plan.key.bucket:
            continue
        column = bucket[1]
        if isinstance(column, exp.Column) and column.name.lower() == stream.event_time.lower():
            found.append(item)
    return found


def _bucketed(query, buckets, event_time: str) -> exp.Expression:
    """``query`` with each bucket item outside aggregates (in SELECT and HAVING)
    the same bucket of the window's start (:data:`BUCKET_START`)."""
    query = query.copy()
    texts = {bare(b).sql() for b in buckets}

    def at_start(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.AggFunc):
            return node
        if not isinstance(node, exp.Column) and bare(node).sql() in texts:
            node = node.copy()
            for column in list(node.find_all(exp.Column)):
                if column.name.lower() == event_time.lower():
                    column.replace(exp.column(BUCKET_START))
            return node
        return node

    for part in ("expressions", "having"):
        value = query.args.get(part)
        if isinstance(value, list):
            query.set(part, [_outside_aggregates(v, at_start) for v in value])
        elif value is not None:
            query.set(part, _outside_aggregates(value, at_start))
    return query


def _outside_aggregates(node: exp.Expression, fn) -> exp.Expression:
    """``node`` transformed by ``fn`` everywhere but inside its aggregates."""
    if isinstance(node, exp.AggFunc):
        return node
    replaced = fn(node)
    if replaced is not node:
        return replaced
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _outside_aggregates(value, fn))
        elif isinstance(value, list):
            done = [
                _outside_aggregates(v, fn) if isinstance(v, exp.Expression) else v for v in value
            ]
            node.set(key, done)
    return node


def _keyed_by_columns(plan: QueryPlan) -> bool:
    """Whether the query's groups are the values of plain columns in the global
    window (an unwindowed ``GROUP BY k``), with no TTL to drop them: the model
    keeps one accumulator per value, as it keeps one per window."""
    return (
        plan.key.kind is KeyKind.COLUMNS
        and plan.key.ttl is None
        and isinstance(plan.window_fn, GlobalWindows)
    )


def _group_columns(group, columns, windows, stream: Table, tvf, untimed: bool) -> list[str] | str:
    """The plain GROUP BY columns (the stream's own names, in GROUP BY order), or
    why the GROUP BY is not the fast path's: it must name a window bound (or,
    without a TVF, the event-time column, unless the groups are ``untimed``: keyed
    by plain columns in the global window, or by a bucket) and otherwise columns
    only."""
    for arg in ("rollup", "cube", "grouping_sets", "totals"):
        if group.args.get(arg):
            return f"GROUP BY {arg.upper()}"
    plain: list[str] = []
    has_window = False
    for item in group.expressions:
        if not isinstance(item, exp.Column):
            return "a GROUP BY item is not a column"
        name = item.name.lower()
        if name in windows:
            has_window = True
        elif name in columns:
            if columns[name] not in plain:
                plain.append(columns[name])
        else:
            return f"GROUP BY {item.name}: not a column of {stream.name}"
    if tvf is not None and not has_window:
        return "GROUP BY has no window bound"
    if untimed or tvf is not None:
        return plain
    if (stream.event_time or "").lower() not in {p.lower() for p in plain}:
        return "GROUP BY has no event-time column"
    return plain


def _session_problem(tvf, plain: list[str]) -> str | None:
    """Sessions merge per model key, and the fast path keys by the GROUP BY
    columns: it runs a session only when those are the session's keys (none
    for an unkeyed session), so that its sessions are the query's."""
    if tvf is None or tvf.args["kind"] != "SESSION":
        return None
    keys = [k.name for k in tvf.args.get("keys") or []]
    if {k.lower() for k in keys} == {p.lower() for p in plain}:
        return None
    per = f"per {', '.join(keys)}" if keys else "over all rows"
    return (
        f"the sessions are {per}, not per the GROUP BY columns ({', '.join(plain)}): "
        "the general path groups the sessions' rows"
    )


def _columns_problem(node, columns, windows, grouped, what) -> str | None:
    """Columns of ``node`` (outside aggregates) that are unknown, a window bound
    where rows are evaluated, or (``grouped`` given) not grouped."""
    for column in node.find_all(exp.Column):
        if column.find_ancestor(exp.AggFunc) is not None and grouped is not None:
            continue
        name = column.name.lower()
        if grouped is None:
            if name in windows:
                return f"{what} reads the window bound {column.name}"
            if name not in columns:
                return f"{what} reads {column.name}, not a column of the stream"
        elif name not in grouped:
            return f"{what} reads {column.name}, which is not grouped"
    return None


def _item_problem(node, columns, windows, grouped, aliases, what) -> str | None:
    for agg in node.find_all(exp.AggFunc):
        if not isinstance(agg, AGGREGATES):
            return f"{what} has the aggregate {agg.sql_name()}"
        if isinstance(agg.parent, (exp.Filter, exp.IgnoreNulls, exp.RespectNulls)):
            return f"{what} has an aggregate with a modifier"
        if agg.find_ancestor(exp.AggFunc) is not None:
            return f"{what} nests aggregates"
        arg = agg.this
        if isinstance(agg, exp.Count) and isinstance(arg, exp.Star):
            continue
        if isinstance(arg, exp.Distinct):
            if not isinstance(agg, exp.Count) or len(arg.expressions) != 1:
                return f"{what} has DISTINCT in an aggregate other than COUNT(DISTINCT x)"
            arg = arg.expressions[0]
        if arg is None or any(k != "this" and v for k, v in agg.args.items() if k != "big_int"):
            return f"{what} has an aggregate with several arguments"
        if arg.find(exp.AggFunc) is not None:
            return f"{what} nests aggregates"
        problem = _columns_problem(arg, columns, windows, None, f"an aggregate of {what}")
        if problem:
            return problem
    body = node.this if isinstance(node, exp.Alias) else node
    if what == "HAVING":
        body = _resolve_aliases(body, aliases, grouped)
    return _columns_problem(body, columns, windows, grouped, what)


def _resolve_aliases(node: exp.Expression, aliases, grouped) -> exp.Expression:
    """HAVING may name a select item by its alias (DuckDB allows it)."""
    node = node.copy()
    for column in list(node.find_all(exp.Column)):
        name = column.name.lower()
        if name not in grouped and name in aliases and column.find_ancestor(exp.AggFunc) is None:
            replacement = aliases[name].copy()
            if column is node:
                return replacement
            column.replace(replacement)
    return node
