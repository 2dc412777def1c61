"""What a join of two streams partitions by: its column equalities (ON and
WHERE) and, when a raw stream's event time is bounded by a window's rows, the
window (:mod:`headwater.sql.plan.keys`)."""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import interval_ms
from headwater.sql.plan.keys.kinds import WINDOW, Origin, Partition, StreamColumn, WindowBounds
from headwater.sql.plan.keys.trace import Tracer, conjuncts, reads_stream


def join_partitions(tracer: Tracer, select: exp.Select) -> Iterator[Partition]:
    """A join of stream-reading sides partitions by its equalities (ON and WHERE)
    and, when a raw stream's event time is bounded by a window, by the window."""
    joins = select.args.get("joins") or []
    sides = [select.args.get("from_"), *joins]
    reading = [s for s in sides if s is not None and reads_stream(s, tracer)]
    if not joins or len(reading) < 2:
        return
    where = select.args.get("where")
    conditions = [j.args.get("on") for j in joins] + [where.this if where else None]
    items: list[frozenset[Origin]] = []
    tracer.in_join = True
    try:
        items += _equalities(tracer, select, conditions)
        bounded = _window_bounded(tracer, select, conditions)
    finally:
        tracer.in_join = False
    if bounded:
        items.append(frozenset({WINDOW}))
    yield Partition("join", joins[0], tuple(items))


def _equalities(tracer: Tracer, select: exp.Select, conditions) -> list[frozenset[Origin]]:
    """The column equalities among ``conditions``' conjuncts, as origins."""
    items = []
    for cond in conditions:
        for part in conjuncts(cond):
            if isinstance(part, exp.EQ) and all(
                isinstance(side, exp.Column) for side in (part.this, part.expression)
            ):
                left = tracer.origins(part.this, select)
                right = tracer.origins(part.expression, select)
                if left and right:
                    items.append(left | right)
    return items


_LOWER = (exp.GTE, exp.GT)


_UPPER = (exp.LT, exp.LTE)


def _window_bounded(tracer: Tracer, select: exp.Select, conditions) -> bool:
    """Whether the conditions bound an event time to its window's rows from below
    and above (``B.bidtime >= W.wstart AND B.bidtime < W.wend``, or tighter:
    ``>= W.wend - INTERVAL '10' MINUTE`` of 10-minute windows)."""
    found = set()
    for cond in conditions:
        for part in conjuncts(cond):
            if isinstance(part, exp.Between):
                if _is_event_time(tracer, part.this, select):
                    low = _offset(tracer, part.args.get("low"), select)
                    high = _offset(tracer, part.args.get("high"), select)
                    if low is not None and low >= 0:
                        found.add("lower")
                    if high is not None and high < tracer.size:
                        found.add("upper")
                continue
            if not isinstance(part, _LOWER + _UPPER):
                continue
            for side, other, flip in (
                (part.this, part.expression, False),
                (part.expression, part.this, True),
            ):
                if not _is_event_time(tracer, side, select):
                    continue
                offset = _offset(tracer, other, select)
                if offset is None:
                    continue
                if isinstance(part, _LOWER) != flip:
                    if offset >= 0:
                        found.add("lower")
                else:
                    strict = isinstance(part, exp.LT | exp.GT)
                    if offset < tracer.size or (strict and offset == tracer.size):
                        found.add("upper")
    return found == {"lower", "upper"}


def _offset(tracer: Tracer, node, select) -> int | None:
    """A window bound plus or minus a constant interval, as ms after the window's
    start (None: not such a bound, or a window of no fixed size)."""
    if node is None:
        return None
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
        base = _offset(tracer, node.this, select)
        try:
            delta = interval_ms(node.expression)
        except SqlError:
            return None
        if base is None:
            return None
        return base + delta if isinstance(node, exp.Add) else base - delta
    edges = [
        o.edge for o in tracer.expression(node, select) if isinstance(o, WindowBounds) and o.edge
    ]
    if len(edges) != 1 or (edges[0] != "start" and tracer.size is None):
        return None
    size = tracer.size or 0
    return {"start": 0, "end": size, "time": size - 1}[edges[0]]


def _is_event_time(tracer: Tracer, node, select) -> bool:
    origins = tracer.expression(node, select) if node is not None else frozenset()
    return any(isinstance(o, StreamColumn) and o.event_time for o in origins)
