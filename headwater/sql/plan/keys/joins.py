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
        reach = window_reach(tracer, select, conditions)
    finally:
        tracer.in_join = False
    if reach is not None:
        items.append(frozenset({WINDOW}))
    yield Partition("join", joins[0], tuple(items), reach or 0)


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


def window_reach(tracer: Tracer, select: exp.Select, conditions) -> int | None:
    """How far (ms) past its window's end the conditions let an event time join a
    window's rows, when they bound it from below and above: 0 within the window
    (``B.bidtime >= W.wstart AND B.bidtime < W.wend``, or tighter); a closed
    ``BETWEEN W.wend - INTERVAL '10' SECOND AND W.wend`` reaches 1 ms past it
    (a row at the end joins this window and starts the next). At most one
    window's length (into the next window only); None: not bounded so."""
    lower, reaches = False, []
    for cond in conditions:
        for part in conjuncts(cond):
            for side, bound, is_lower, strict in _comparisons(part):
                if not _is_event_time(tracer, side, select):
                    continue
                offset = _offset(tracer, bound, select)
                if offset is None:
                    continue
                if is_lower:
                    lower = lower or offset >= 0
                else:
                    reaches.append(max(0, offset + (0 if strict else 1) - (tracer.size or 0)))
    reach = min(reaches, default=None)
    if not lower or reach is None or (reach and reach > (tracer.size or 0)):
        return None
    return reach


def _comparisons(part: exp.Expression) -> Iterator[tuple]:
    """A conjunct's bounds of one side by the other: (side, bound, whether a lower
    bound, whether strict); a BETWEEN is two inclusive ones."""
    if isinstance(part, exp.Between):
        yield part.this, part.args.get("low"), True, False
        yield part.this, part.args.get("high"), False, False
        return
    if not isinstance(part, _LOWER + _UPPER):
        return
    strict = isinstance(part, exp.LT | exp.GT)
    yield part.this, part.expression, isinstance(part, _LOWER), strict
    yield part.expression, part.this, not isinstance(part, _LOWER), strict


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
