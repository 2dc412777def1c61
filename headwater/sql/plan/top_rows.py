"""Which keyed queries need only each key's first rows: deduplication and Top-N.

``SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY o) AS rn
FROM s) WHERE rn <= n`` (NEXMark q18, q19; Flink's deduplication and Top-N)
shows only each key's first ``n`` rows by ``o``. The general path keeps a key's
rows in its state and evaluates the query over them; a row that ``n`` rows of
its key precede can never show again, so the model's reducer may drop it
(:class:`headwater.model.keep.TopRows`) and the key's state stays at about
``n`` rows. The query over the rows kept is the query over all of them: a
row's rank counts the rows that precede it, and every row that precedes a kept
row is kept, and so is every row tied with one. (Which of several tied rows
ROW_NUMBER numbers first, SQL leaves to the engine, over all rows or these:
a query that must be the same on every engine orders by a unique column last.)

The shape is checked on the query's text, never on data: the window function
ranks the rows of one stream as they arrive (no WHERE, join or other window
function beneath it), partitions them by exactly the query's key, orders them
by plain columns, and the outer WHERE bounds its rank by a constant in a
conjunct (``rn <= n``, ``rn < n``, ``rn = n``); anything else keeps every row.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from headwater.model.windows import GlobalWindows
from headwater.sql.plan.keys import KeyKind
from headwater.sql.plan.planner import QueryPlan

#: The ranking functions whose rank of a row counts the rows before it (RANK:
#: those strictly before; ROW_NUMBER: those before, ties in some order).
_RANKS = (exp.RowNumber, exp.Rank)
#: Clauses of the ranked SELECT that would change which rows it ranks.
_INNER = ("with_", "joins", "laterals", "distinct", "qualify", "where", "group", "having")
_INNER += ("limit", "offset", "order")
#: Clauses of the outer SELECT that combine its rows.
_OUTER = ("with_", "joins", "laterals", "distinct", "qualify", "group", "having")


@dataclass(frozen=True)
class FirstRows:
    """A query that shows each key's first ``n`` rows of stream ``stream`` by
    ``order`` (its columns, each with whether descending)."""

    stream: str
    n: int
    order: tuple[tuple[str, bool], ...]


def first_rows(plan: QueryPlan) -> FirstRows | None:
    """The rows per key that ``plan`` can show (None: it may show any of them)."""
    if plan.stages or plan.tables or len(plan.streams) != 1 or not plan.is_stream:
        return None
    if plan.key.kind is not KeyKind.COLUMNS or not isinstance(plan.window_fn, GlobalWindows):
        return None
    outer = plan.group_query
    if not isinstance(outer, exp.Select) or any(outer.args.get(c) for c in _OUTER):
        return None
    source = outer.args.get("from_")
    inner = source.this.this if source and isinstance(source.this, exp.Subquery) else None
    stream = plan.streams[0].name
    if not isinstance(inner, exp.Select) or not _reads_only(inner, stream):
        return None
    if _combines(outer.expressions):
        return None
    ranked = _ranking(inner)
    if ranked is None:
        return None
    name, window = ranked
    order = _order(window)
    keys = {c.lower() for c in plan.key.columns_of(stream)}
    if order is None or _partition(window) != keys:
        return None
    n = _bound(outer.args.get("where"), name, source.this.alias_or_name)
    return None if n is None else FirstRows(stream, n, order)


def _reads_only(inner: exp.Select, stream: str) -> bool:
    """Whether ``inner`` ranks the rows of ``stream`` as they are (no clause
    that filters, combines or joins them)."""
    source = inner.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return False
    if source.this.name.lower() != stream.lower() or source.this.args.get("db"):
        return False
    return not any(inner.args.get(c) for c in _INNER)


def _combines(items: list[exp.Expression]) -> bool:
    """Whether any of ``items`` reads more than its own row: an aggregate, a
    window function or a subquery."""
    return any(i.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Select) for i in items)


def _ranking(inner: exp.Select) -> tuple[str, exp.Window] | None:
    """The one ranking window of ``inner``'s items and its alias (None: none, or
    another item reads more than its own row)."""
    found = None
    for item in inner.expressions:
        window = item.this if isinstance(item, exp.Alias) else None
        if isinstance(window, exp.Window) and isinstance(window.this, _RANKS) and not found:
            found = (item.alias.lower(), window)
        elif _combines([item]):
            return None
    return found


def _partition(window: exp.Window) -> set[str] | None:
    """The window's PARTITION BY columns (None: an item that is not a column)."""
    items = window.args.get("partition_by") or []
    if not all(isinstance(i, exp.Column) for i in items):
        return None
    return {i.name.lower() for i in items}


def _order(window: exp.Window) -> tuple[tuple[str, bool], ...] | None:
    """The window's ORDER BY as (column, descending) pairs (None: none, or an item
    that is not a column)."""
    order = window.args.get("order")
    items = order.expressions if isinstance(order, exp.Order) else []
    if not items or window.args.get("spec") is not None:
        return None
    pairs = []
    for item in items:
        if not isinstance(item, exp.Ordered) or not isinstance(item.this, exp.Column):
            return None
        pairs.append((item.this.name, bool(item.args.get("desc"))))
    return tuple(pairs)


def _bound(where: exp.Where | None, name: str, alias: str) -> int | None:
    """The least ``n`` that a conjunct of ``where`` bounds rank ``name`` by (rank
    <= n), None if none does."""
    if where is None or where.find(exp.Select, exp.Subquery):  # a subquery reads the rows
        return None
    conjuncts = where.this.flatten() if isinstance(where.this, exp.And) else [where.this]
    found = [b for c in conjuncts if (b := _conjunct_bound(c, name, alias)) is not None]
    return min(found) if found else None


def _conjunct_bound(node: exp.Expression, name: str, alias: str) -> int | None:
    """``n`` if ``node`` is ``rank <= n``, ``rank < n + 1`` or ``rank = n`` (n >= 1)
    in either order of its operands, else None."""
    flipped = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.EQ: exp.EQ}
    if not isinstance(node, (exp.LTE, exp.LT, exp.EQ, exp.GTE, exp.GT)):
        return None
    left, right, kind = node.this, node.expression, type(node)
    if _is_rank(right, name, alias) and kind in flipped:
        left, right, kind = right, left, flipped[kind]
    if kind not in (exp.LTE, exp.LT, exp.EQ) or not _is_rank(left, name, alias):
        return None
    if not isinstance(right, exp.Literal) or right.is_string or not right.is_int:
        return None
    n = int(right.this) - (1 if kind is exp.LT else 0)
    return n if n >= 1 else None


def _is_rank(node: exp.Expression, name: str, alias: str) -> bool:
    if not isinstance(node, exp.Column) or node.name.lower() != name:
        return False
    return not node.table or node.table.lower() == (alias or "").lower()
