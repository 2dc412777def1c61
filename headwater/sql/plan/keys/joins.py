"""What a join of two streams partitions by: its column equalities (ON and
WHERE) and, when a raw stream's event time is bounded by a window's rows, the
window; a join of two raw streams whose event times bound each other (an
interval join) also says how its pairs partition by buckets of either side's
event time (:mod:`headwater.sql.plan.keys`)."""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import interval_ms
from headwater.sql.plan.keys.kinds import (
    WINDOW,
    IntervalBound,
    Origin,
    Partition,
    StreamColumn,
    WindowBounds,
)
from headwater.sql.plan.keys.trace import Source, Tracer, conjuncts, reads_stream


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
    bounds = interval_bounds(tracer, select, conditions)
    yield Partition("join", joins[0], tuple(items), reach or 0, bounds)


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


def interval_bounds(tracer: Tracer, select: exp.Select, conditions) -> tuple[IntervalBound, ...]:
    """An inner join of two raw streams whose conditions bound one's event time by
    the other's plus constant intervals from below and above (``o.t BETWEEN s.t -
    INTERVAL '4' SECOND AND s.t + INTERVAL '2' SECOND``): each side as the one
    whose buckets partition the pairs, the side the bounds are written around
    first; () when not such a join (an outer join, whose unmatched rows of the
    reaching side would show in each of its groups, is not)."""
    if any(
        j.side or (j.kind or "").upper() not in ("", "INNER", "CROSS")
        for j in select.args.get("joins") or []
    ):
        return ()
    sources = tracer.sources(select)
    streams = [s for s in sources if _raw_stream(s)]
    others = [s for s in sources if not _raw_stream(s)]
    names = {s.table.name.lower() for s in streams}
    if len(streams) != 2 or len(names) != 2 or any(_reads_stream(tracer, s) for s in others):
        return ()
    first, second = streams
    #: d = second.t - first.t: its lower and upper bounds (ms); the side written around
    low, high, around = None, None, None
    for cond in conditions:
        for part in conjuncts(cond):
            for side, bound, is_lower, _ in _comparisons(part):
                found = _difference(tracer, sources, streams, side, bound)
                if found is None:
                    continue
                ref, offset = found
                around = around or ref
                if ref is second:  # first.t >= second.t + offset: d <= -offset
                    is_lower, offset = not is_lower, -offset
                if is_lower:
                    low = offset if low is None else max(low, offset)
                else:
                    high = offset if high is None else min(high, offset)
    if low is None or high is None or low > high:
        return ()
    of_first = _bound(first, second, max(-low, 0), max(high, 0))
    of_second = _bound(second, first, max(high, 0), max(-low, 0))
    return (of_second, of_first) if around is second else (of_first, of_second)


def _reads_stream(tracer: Tracer, source: Source) -> bool:
    """Whether a FROM item other than a raw stream reads a stream."""
    if source.tvf is not None:
        return True
    if source.query is not None:
        return reads_stream(source.query, tracer)
    return False


def _raw_stream(source: Source) -> bool:
    return source.tvf is None and source.table is not None and source.table.is_stream


def _bound(core: Source, other: Source, before: int, after: int) -> IntervalBound:
    table = core.table
    return IntervalBound(
        table.name.lower(), core.alias, table.event_time, other.table.name.lower(), before, after
    )


def _difference(tracer, sources, streams, side, bound) -> tuple[Source, int] | None:
    """(the reference whose event time ``bound`` is, its offset in ms) when ``side``
    is the other reference's event time and ``bound`` the one's plus or minus
    constant intervals; else None."""
    mine = _event_time_of(tracer, sources, streams, side)
    if mine is None:
        return None
    offset = 0
    while True:
        while isinstance(bound, exp.Paren):
            bound = bound.this
        if not (
            isinstance(bound, exp.Add | exp.Sub) and isinstance(bound.expression, exp.Interval)
        ):
            break
        try:
            delta = interval_ms(bound.expression)
        except SqlError:
            return None
        offset += delta if isinstance(bound, exp.Add) else -delta
        bound = bound.this
    ref = _event_time_of(tracer, sources, streams, bound)
    if ref is None or ref is mine:
        return None
    return ref, offset


def _event_time_of(tracer, sources, streams, node) -> Source | None:
    """The stream reference whose event time column ``node`` is (None: not one)."""
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return None
    qualifier, name = node.table.lower(), node.name.lower()
    matches = [
        s
        for s in sources
        if (s.alias == qualifier if qualifier else name in map(str.lower, tracer.columns(s)))
    ]
    if len(matches) != 1 or not any(matches[0] is s for s in streams):
        return None
    event_time = matches[0].table.event_time
    return matches[0] if event_time and event_time.lower() == name else None
