"""Every operator of a query that combines rows of a stream (an aggregate,
DISTINCT, a window function, a join, a set operation, a subquery, a LIMIT, a
Session) and what it partitions by (:mod:`headwater.sql.plan.keys`)."""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from headwater.sql.errors import SqlError
from headwater.sql.parse.dialect import WindowTVF, position
from headwater.sql.plan.catalog import Catalog
from headwater.sql.plan.keys.joins import join_partitions
from headwater.sql.plan.keys.kinds import WINDOW, Origin, Partition
from headwater.sql.plan.keys.trace import Tracer, conjuncts, output_names, reads_stream


def _enclosing_select(node: exp.Expression) -> exp.Select | None:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        parent = parent.parent
    return parent


def _item(tracer: Tracer, node: exp.Expression, select: exp.Select) -> frozenset[Origin]:
    """A partition item (GROUP BY / PARTITION BY / DISTINCT expression): a select
    alias or ordinal resolves to the select's expression."""
    if isinstance(node, exp.Literal) and node.is_int:
        items = select.expressions
        index = int(node.name) - 1
        return tracer.expression(items[index], select) if 0 <= index < len(items) else frozenset()
    if isinstance(node, exp.Column) and not node.table:
        found = tracer.origins(node, select)
        if found:
            return found
        for item in select.expressions:
            if isinstance(item, exp.Alias) and item.alias.lower() == node.name.lower():
                return tracer.expression(item.this, select)
        return found
    return tracer.expression(node, select)


#: GROUP BY forms with totals over fewer columns than listed.
_GROUPING_SETS = ("rollup", "cube", "grouping_sets", "totals")


def _select_partitions(tracer: Tracer, select: exp.Select) -> Iterator[Partition]:
    """The combining operators of one SELECT over a stream and their partitions."""
    group = select.args.get("group")
    aggregates = [
        a
        for e in [*select.expressions, select.args.get("having")]
        if e is not None
        for a in e.find_all(exp.AggFunc)
        if a.find_ancestor(exp.Window, exp.Select) is select
    ]
    if group is not None or aggregates:
        items = [_item(tracer, g, select) for g in (group.expressions if group else [])]
        if group is not None and any(group.args.get(a) for a in _GROUPING_SETS):
            items = []  # a rollup's totals combine across the grouping columns
        if _expression_subquery(select) is not None:
            items += _correlations(tracer, select)  # an aggregate per outer row
        yield Partition("GROUP BY" if group else "aggregate", group or aggregates[0], tuple(items))
    distinct = select.args.get("distinct")
    if distinct is not None:
        on = distinct.args.get("on")
        exprs = on.expressions if on is not None else select.expressions
        items = []
        for e in exprs:
            if isinstance(e, exp.Star):
                items += [
                    tracer.of_source(s, c.lower())
                    for s in tracer.sources(select)
                    for c in tracer.columns(s)
                ]
            else:
                items.append(tracer.expression(e, select))
        yield Partition("DISTINCT", distinct, tuple(items))
    for window in select.find_all(exp.Window):
        if _enclosing_select(window) is select:
            parts = window.args.get("partition_by") or []
            yield Partition(
                "window function", window, tuple(_item(tracer, p, select) for p in parts)
            )
    yield from join_partitions(tracer, select)
    if select.args.get("limit") is not None or select.args.get("offset") is not None:
        if select is not tracer.query:
            yield Partition("LIMIT", select.args.get("limit") or select, ())


def _set_partitions(tracer: Tracer, node: exp.SetOperation) -> Iterator[Partition]:
    """A set operation that removes duplicates (UNION, INTERSECT, EXCEPT)
    partitions by every output column, position by position."""
    if isinstance(node, exp.Union) and not node.args.get("distinct"):
        return
    if not reads_stream(node, tracer):
        return
    names = output_names(node)
    items = tuple(tracer.output(node, n) for n in names)
    yield Partition(type(node).__name__.upper(), node, items)


def _expression_subquery(select: exp.Select) -> exp.Expression | None:
    """The IN / EXISTS / comparison a subquery in an expression is part of (None:
    ``select`` is a query, a FROM item, a CTE or a set operation's branch)."""
    parent = select.parent
    if isinstance(parent, exp.Exists):
        return parent
    if isinstance(parent, exp.Subquery) and not isinstance(
        parent.parent, exp.From | exp.Join | exp.CTE | exp.SetOperation
    ):
        return parent.parent
    return None


def _correlations(tracer: Tracer, select: exp.Select) -> list[frozenset[Origin]]:
    """A subquery's equalities between its own columns and the outer row's
    (``A.item = B.item``): the subquery combines the outer row with these rows."""
    where = select.args.get("where")
    found = []
    for part in conjuncts(where.this if where is not None else None):
        if not isinstance(part, exp.EQ):
            continue
        sides = (part.this, part.expression)
        if not all(isinstance(side, exp.Column) for side in sides):
            continue
        local = [tracer.is_local(side, select) for side in sides]
        if local[0] != local[1]:
            origins = tracer.origins(sides[0], select) | tracer.origins(sides[1], select)
            if origins:
                found.append(origins)
    return found


def _subquery_partitions(tracer: Tracer, select: exp.Select) -> Iterator[Partition]:
    """A subquery in an expression (IN, EXISTS, a scalar subquery) over a stream
    combines the outer row with the subquery's rows: by its correlations and, for
    ``x IN (SELECT y ...)``, by ``x = y``."""
    context = _expression_subquery(select)
    if context is None or not reads_stream(select, tracer):
        return
    items = _correlations(tracer, select)
    outer = _enclosing_select(context)
    if isinstance(context, exp.In) and outer is not None and len(select.expressions) == 1:
        left = tracer.expression(context.this, outer)
        right = tracer.expression(select.expressions[0], select)
        if left and right:
            items.append(left | right)
    yield Partition("subquery", context, tuple(items))


def _session_partition(tracer: Tracer, tvf: WindowTVF) -> Partition | None:
    """A Session TVF combines rows: a session is made of the rows of its keys
    within a gap of each other, so it partitions by its keys (and by the session
    itself, the window, as the model merges sessions)."""
    if tvf.args["kind"] != "SESSION":
        return None
    source = tracer.source_of(tvf)
    keys = [tracer.of_source(source, k.name.lower()) for k in tvf.args.get("keys") or []]
    return Partition("Session", tvf, (frozenset({WINDOW}), *keys))


def check_session_keys(query: exp.Expression, catalog: Catalog) -> None:
    """Sessions of a keyed Session are maintained per key: every other combining
    operator must partition by the keys too (traced through aliases and
    subqueries: ``category AS g`` is still the key), or sessions of different keys
    with equal bounds would have to be combined across keys."""
    found = partitions(query, catalog)
    for session in (p for p in found if p.operator == "Session"):
        tvf = session.node
        names = [k.name for k in tvf.args.get("keys") or []]
        keys = dict(zip(names, session.items[1:], strict=True))
        for other in found:
            if other.operator == "Session":
                continue
            missing = [n for n, k in keys.items() if not any(i & k for i in other.items)]
            if missing:
                line, col = position(other.node)
                raise SqlError(
                    f"the sessions are per {', '.join(names)}: this {other.operator} must "
                    f"partition by {', '.join(missing)} too",
                    line,
                    col,
                    f"Add {', '.join(missing)} to the GROUP BY / PARTITION BY",
                )


def partitions(query: exp.Expression, catalog: Catalog, size: int | None = None) -> list[Partition]:
    """Every combining operator of ``query`` over a stream, with its partition
    (``size``: of the query's windows, None for sessions or none)."""
    tracer = Tracer(query, catalog, size)
    found: list[Partition] = [_session_partition(tracer, t) for t in query.find_all(WindowTVF)]
    found = [p for p in found if p is not None]
    for node in query.find_all(exp.Select, exp.SetOperation):
        if isinstance(node, exp.SetOperation):
            found += _set_partitions(tracer, node)
            continue
        if not reads_stream(node, tracer):
            continue
        found += _select_partitions(tracer, node)
        found += _subquery_partitions(tracer, node)
    return found
