"""From a parsed query to what runs: its tables, its groups, its EMIT.

A streaming query is maintained per group of rows, by its maintenance key
(:mod:`headwater.sql.plan.keys`: what every operator combining rows partitions by).
Keyed by window bounds, groups are the windows of its windowing table
functions (all of one query share one windowing) and a group's result is the
query over the group's rows with the window columns set to the group's bounds
(windowed aggregates, joins on window bounds, NEXMark Query 7, window Top-N).
Keyed by the event time (or combining nothing), groups are single event times.
Keyed by a bucket of the event time (``CAST(ts AS DATE)``), groups are the
buckets, tumbling windows of the bucket's size (the query over a day's rows).
Keyed by an interval join's bound (``o.t BETWEEN s.t - INTERVAL '4' SECOND AND
s.t + INTERVAL '2' SECOND``), groups are buckets of one side's event time with
the other side's rows that far around: hopping windows, freed by the watermark.
Keyed by plain columns, or by nothing, groups are the key's values (or one
group) in a global window: nothing is late, state grows with the key's values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

import pandas as pd
from sqlglot import exp

from headwater.model.panes import Accumulation
from headwater.model.strategy import WindowingStrategy
from headwater.model.windows import (
    CumulativeWindows,
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    WindowFn,
)
from headwater.sql.errors import SqlError
from headwater.sql.parse.dialect import WindowTVF, position
from headwater.sql.plan.casts import truncating_casts
from headwater.sql.plan.catalog import Catalog, Table
from headwater.sql.plan.emit import Materialization
from headwater.sql.plan.functions import ScalarFunction, called
from headwater.sql.plan.group_all import expand_group_all
from headwater.sql.plan.keys import (
    WINDOW_COLUMNS,
    KeyKind,
    MaintenanceKey,
    check_session_keys,
    derive_key,
    partitions,
)
from headwater.sql.plan.quality import plan_quality
from headwater.sql.plan.stages import Stage, split, stages
from headwater.sql.plan.ttl import with_ttl
from headwater.sql.plan.tvf_inputs import inline_tvf_subqueries


@dataclass(frozen=True)
class QueryPlan:
    """A query ready to run: ``group_query`` is evaluated per event-time group;
    ``order`` (ORDER BY / LIMIT) applies to table views only."""

    name: str
    query: exp.Expression
    group_query: exp.Expression
    order: exp.Expression | None
    emit: Materialization
    window_fn: WindowFn
    keys: tuple[str, ...]
    key: MaintenanceKey
    group_mode: bool
    streams: tuple[Table, ...]
    tables: tuple[Table, ...]
    allowed_lateness: int
    #: The user functions the query calls.
    functions: tuple[ScalarFunction, ...] = ()
    #: The stages of a query one group as a whole whose parts have keys of their
    #: own (:mod:`headwater.sql.plan.stages`); () when it is maintained as one.
    stages: tuple[Stage, ...] = ()
    #: stage 1's own plan (the subquery over the streams) of a query in stages
    first_stage: QueryPlan | None = None
    #: Whether a plain windowed aggregate may take the fast path (False: the
    #: general path runs it, so tests and users can compare the two paths).
    fast_path: bool = True

    def windowing(self) -> WindowingStrategy:
        """The model's windowing of the query's event-time groups: its window, the
        EMIT trigger and retention, accumulating (retracting for merging windows,
        so that the groups a merge takes away are withdrawn).

        A session is kept a gap longer: a row that is not late (its own window
        ``[t, t + gap)`` ends after the watermark) may still start before a closed
        session's end and bridge it; with the session's state gone, it would open
        a session of its own where the bounded query has one merged session."""
        merging = self.window_fn.is_merging
        retention = self.emit.retention()
        if isinstance(self.window_fn, Sessions):
            retention = max(retention, self.window_fn.gap)
        return WindowingStrategy(
            window_fn=self.window_fn,
            trigger=self.emit.trigger(),
            accumulation=Accumulation.RETRACTING if merging else Accumulation.ACCUMULATING,
            allowed_lateness=self.allowed_lateness,
            retention=retention,
        )

    @property
    def is_stream(self) -> bool:
        return bool(self.streams)

    def maintenance(self, accumulated: bool = False) -> str:
        """The query's key and how its state grows; of a query in stages, each
        stage's (``explain()``, docs/sql.md's NEXMark table). ``accumulated``: the
        fast path keeps accumulators, not rows."""
        if not self.stages:
            return self.key.describe(accumulated)
        each = "; ".join(s.describe() for s in self.stages)
        return f"in {len(self.stages)} stages (as one query: {self.key.describe()}); {each}"


def _ms(tvf: WindowTVF, arg: str) -> timedelta:
    """A TVF duration (int ms) as the model's window functions take it."""
    return timedelta(milliseconds=int(tvf.args.get(arg) or 0))


def _window_fn(tvf: WindowTVF) -> tuple[WindowFn, tuple[str, ...]]:
    kind = tvf.args["kind"]
    if kind == "TUMBLE":
        return FixedWindows(_ms(tvf, "size"), _ms(tvf, "offset")), ()
    if kind == "HOP":
        return SlidingWindows(_ms(tvf, "size"), _ms(tvf, "slide"), _ms(tvf, "offset")), ()
    if kind == "CUMULATE":
        return CumulativeWindows(_ms(tvf, "step"), _ms(tvf, "size"), _ms(tvf, "offset")), ()
    keys = tuple(k.name for k in tvf.args.get("keys") or [])
    # Flink's and Spark's sessions merge windows that touch: a row exactly one gap
    # after the last one extends the session.
    return Sessions(_ms(tvf, "gap"), merge_touching=True), keys


def _shortest(fn: WindowFn | None) -> int | None:
    """The length (ms) of the windows' shortest window, by which the key analysis
    checks that a join bounds a raw stream's rows to a window: a bound within the
    shortest window of a cumulating period (its step) is within every window of it,
    as they all start at the period's start. None: sessions (no fixed length)."""
    if isinstance(fn, FixedWindows | SlidingWindows):
        return fn.size
    if isinstance(fn, CumulativeWindows):
        return fn.step
    return None


def _table_refs(query: exp.Expression) -> list[exp.Table]:
    """Table references that are tables, not CTE names (TVF data included)."""
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    return [t for t in query.find_all(exp.Table) if t.name and t.name.lower() not in ctes]


def analyze(
    query: exp.Expression,
    catalog: Catalog,
    name: str = "query",
    functions: Mapping[str, ScalarFunction] | None = None,
    state_ttl: int | None = None,
    fast_path: bool = True,
) -> QueryPlan:
    """Resolve ``query``'s tables and windowing against ``catalog``; SqlError if
    it cannot run (with the position of the offending token). ``functions``: the
    user functions by lower-case name; ``state_ttl``: the query's state
    time-to-live (ms; :mod:`headwater.sql.plan.ttl`), over its streams' own;
    ``fast_path``: whether a plain windowed aggregate may take the fast path."""
    query = inline_tvf_subqueries(expand_group_all(query), catalog)
    query = truncating_casts(query, [catalog.get(t.name, t) for t in _table_refs(query)])
    emit = Materialization.of(query.args.get("emit"))
    tvfs = list(query.find_all(WindowTVF))
    windowing: tuple[WindowFn, tuple[str, ...]] | None = None
    for tvf in tvfs:
        table = _tvf_table(tvf, catalog)
        this = _window_fn(tvf)
        if windowing is not None and this != windowing:
            line, col = position(tvf)
            raise SqlError(
                "all windowing table functions of one query must use the same windows",
                line,
                col,
                "Join windowed relations of equal windows, or run the queries separately",
            )
        windowing = this
        del table
    refs = {t.name.lower(): catalog.get(t.name, t) for t in _table_refs(query)}
    streams = tuple(t for t in refs.values() if t.is_stream)
    tables = tuple(t for t in refs.values() if not t.is_stream)
    key = MaintenanceKey(KeyKind.ROW)
    window_fn, group_mode = FixedWindows(timedelta(milliseconds=1)), True
    if streams:
        _check_output_names(query)
        check_session_keys(query, catalog)
        fn = windowing[0] if windowing else None
        size = _shortest(fn)
        reach = _reach(query, catalog, fn, size)
        windowed = _windowed(query, streams, windowing is not None, reach)
        key = derive_key(query, catalog, windowed, size)
        if key.kind is KeyKind.WINDOW:
            key = replace(key, reach=reach)
        window_fn, group_mode = _groups(query, key, windowing, windowed)
        key = with_ttl(key, query, streams, state_ttl)
        at = tvfs[0] if tvfs else query
        streams = plan_quality(query, streams, windowing[0] if tvfs else None, at)
    group_query, order = _split_order(query, emit, bool(streams))
    staged: tuple[Stage, ...] = ()
    first = None
    found = split(group_query) if key.kind is KeyKind.NONE and key.ttl is None else None
    # corrections recompute a stream's groups from its archive as one query: kept one
    if found is not None and emit.delay is None and not any(t.correction for t in streams):
        first = analyze(found.inner.copy(), catalog, name, functions, state_ttl)
        staged = stages(group_query, first.key)
    return QueryPlan(
        name=name,
        query=query,
        group_query=group_query,
        order=order,
        emit=emit,
        window_fn=window_fn,
        keys=windowing[1] if windowing and group_mode else (),
        key=key,
        group_mode=group_mode,
        streams=streams,
        tables=tables,
        allowed_lateness=max((t.allowed_lateness for t in streams), default=0),
        functions=called(query, functions or {}),
        stages=staged,
        first_stage=first if staged else None,
        fast_path=fast_path,
    )


def _tvf_table(tvf: WindowTVF, catalog: Catalog) -> Table:
    data = tvf.this
    if not isinstance(data, exp.Table):
        line, col = position(tvf)
        raise SqlError(
            "a windowing table function over a subquery is not supported yet",
            line,
            col,
            "Window the table itself and filter in WHERE",
        )
    table = catalog.get(data.name, data)
    timecol = tvf.args["timecol"]
    if timecol.name not in table.columns:
        line, col = position(timecol)
        raise SqlError(
            f"table {table.name!r} has no column {timecol.name!r}",
            line,
            col,
            f"Its columns are {', '.join(table.columns)}",
        )
    if table.is_stream and table.event_time and timecol.name != table.event_time:
        line, col = position(timecol)
        raise SqlError(
            f"DESCRIPTOR({timecol.name}) is not the event time of {table.name!r} "
            f"({table.event_time}), which carries its watermark",
            line,
            col,
            f"Window by DESCRIPTOR({table.event_time})",
        )
    _check_bounded_time_column(table, timecol)
    return table


def _check_bounded_time_column(table: Table, timecol: exp.Expression) -> None:
    """SqlError at DESCRIPTOR(...) when a local bounded table's time column holds
    numbers or booleans: DuckDB cannot cast them to TIMESTAMP and would fail with
    a conversion error that names neither the query nor the fix."""
    if table.frame is None or table.is_stream:
        return
    column = table.frame[timecol.name]
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        line, col = position(timecol)
        raise SqlError(
            f"DESCRIPTOR({timecol.name}): column {timecol.name!r} of {table.name!r} "
            f"holds {column.dtype} values, not timestamps",
            line,
            col,
            f"Pass timestamps, e.g. df[{timecol.name!r}] = "
            f"pd.to_datetime(df[{timecol.name!r}], unit='ms') for epoch milliseconds",
        )


_LOWER = (exp.GTE, exp.GT)
_UPPER = (exp.LT, exp.LTE)


def _bounds(query: exp.Expression, ref: exp.Table, column: str) -> set[str]:
    """Which sides (``lower``, ``upper``) of a window bound the event time of the
    stream reference ``ref`` in some comparison of the query."""
    name = ref.alias_or_name

    def is_event_time(node) -> bool:
        return isinstance(node, exp.Column) and node.name == column and node.table in ("", name)

    def has_window(node) -> bool:
        return any(c.name in WINDOW_COLUMNS for c in node.find_all(exp.Column))

    found = set()
    for cmp in query.find_all(*_LOWER, *_UPPER, exp.Between):
        if isinstance(cmp, exp.Between):
            if is_event_time(cmp.this) and has_window(cmp):
                _refuse_inclusive_end(cmp, cmp.args.get("high"), name, column)
                found |= {"lower", "upper"}
            continue
        left, right = cmp.this, cmp.expression
        for side, other, flip in ((left, right, False), (right, left, True)):
            if is_event_time(side) and has_window(other):
                lower = isinstance(cmp, _LOWER) != flip
                if not lower and isinstance(cmp, (exp.LTE, exp.GTE)):
                    _refuse_inclusive_end(cmp, other, name, column)
                found.add("lower" if lower else "upper")
    return found


#: A window's exclusive end: it holds event times in [wstart, wend).
_ENDS = frozenset({"wend", "window_end"})


def _refuse_inclusive_end(cmp: exp.Expression, bound, alias: str, column: str) -> None:
    """``et <= wend`` (or ``BETWEEN ... AND wend``) takes in the row at ``wend``,
    which belongs to the next window: a stream, maintained per window, would never
    show it where a bounded run of the same query does."""
    if isinstance(bound, exp.Column) and bound.name in _ENDS:
        line, col = position(cmp)
        raise SqlError(
            f"{alias}.{column} <= {bound.sql()} takes in a row at {bound.sql()}, which is "
            "in the next window (a window holds [wstart, wend)): maintained per window, "
            "the stream would never show it, while a bounded run would",
            line,
            col,
            f"Write {alias}.{column} < {bound.sql()} (or <= window_time)",
        )


def _compared(query: exp.Expression, ref: exp.Table, column: str) -> bool:
    """Whether a comparison (or BETWEEN) of the query bounds the event time of the
    stream reference ``ref`` (the bound a reaching join found is its, not another
    reference's of the same stream)."""
    name = ref.alias_or_name
    for cmp in query.find_all(*_LOWER, *_UPPER, exp.Between):
        sides = [cmp.this] if isinstance(cmp, exp.Between) else [cmp.this, cmp.expression]
        for side in sides:
            if isinstance(side, exp.Column) and side.name == column and side.table == name:
                return True
    return False


def _reach(query: exp.Expression, catalog: Catalog, fn: WindowFn | None, size: int | None) -> int:
    """How far (ms) past a tumbling window's end a join lets a raw stream's rows
    join it (``BETWEEN window_end - INTERVAL '10' SECOND AND window_end``, NEXMark
    Query 7 as Flink writes it); 0 within the window, or of other windows (a
    reaching bound of hopping or cumulating windows stays on the exact path)."""
    if not isinstance(fn, FixedWindows):
        return 0
    return max((p.reach for p in partitions(query, catalog, size)), default=0)


def _windowed(
    query: exp.Expression, streams: tuple[Table, ...], windowed: bool, reach: int = 0
) -> bool:
    """Whether every stream row belongs to the windows of its event time: the query
    has a windowing TVF and every stream read directly (not through a TVF) has its
    event time bounded by a window of the query (NEXMark Query 7). ``reach``: a
    join bounds a raw stream's event time to a window and up to that far past its
    end (:func:`_reach`): the one raw stream reference is bounded (of several, the
    bound could not be told to be every one's)."""
    if not windowed:
        return False
    by_name = {t.name.lower(): t for t in streams}
    raw = [
        t
        for t in _table_refs(query)
        if t.name.lower() in by_name and not isinstance(t.parent, WindowTVF)
    ]
    if reach:
        return len(raw) == 1 and _compared(query, raw[0], by_name[raw[0].name.lower()].event_time)
    bounded = [_bounds(query, ref, by_name[ref.name.lower()].event_time) for ref in raw]
    return all(b == {"lower", "upper"} for b in bounded)


def _groups(
    query: exp.Expression,
    key: MaintenanceKey,
    tvf: tuple[WindowFn, tuple[str, ...]] | None,
    windowed: bool,
) -> tuple[WindowFn, bool]:
    """The model's windows of the query's groups, and whether a group's rows are
    one window's (the TVF columns are the group's bounds: ``group`` mode) or the
    TVFs are computed over the group's rows (``compute`` mode)."""
    instant = FixedWindows(timedelta(milliseconds=1))
    if key.kind in (KeyKind.WINDOW, KeyKind.ROW) and tvf is not None and windowed:
        fn = tvf[0]
        if key.reach and isinstance(fn, FixedWindows):
            # a window's group also holds the joined rows up to ``reach`` past its
            # end: windows of that length, one starting every window's length
            ms = [timedelta(milliseconds=m) for m in (fn.size + key.reach, fn.size, fn.offset)]
            return SlidingWindows(*ms), True
        return fn, True
    if key.kind in (KeyKind.ROW, KeyKind.EVENT_TIME, KeyKind.WINDOW):
        return instant, tvf is None
    if key.kind is KeyKind.BUCKET:  # a bucket of the event time is a tumbling window
        return FixedWindows(timedelta(milliseconds=key.bucket)), tvf is None
    if key.kind is KeyKind.INTERVAL and key.interval is not None:
        # group j: the bucket [jS, (j+1)S) widened by the bound on both sides
        bound = key.interval
        ms = (bound.size + bound.before + bound.after, bound.size, -bound.before)
        return SlidingWindows(*(timedelta(milliseconds=m) for m in ms)), True
    emit = query.args.get("emit")
    if emit is not None and emit.args.get("watermark"):
        line, col = position(emit)
        raise SqlError(
            "EMIT AFTER WATERMARK needs groups the watermark completes, and this query's "
            f"groups are not bounded in event time ({key.describe(accumulated=None)})",
            line,
            col,
            "Group by window bounds (FROM Tumble(...) ... GROUP BY wstart, wend), by the "
            "event time or by its day (CAST(bidtime AS DATE)), or drop AFTER WATERMARK to see "
            "every change",
        )
    return GlobalWindows(), False


def _check_output_names(query: exp.Expression) -> None:
    """A stream's changelog names its columns: two result columns of one name
    (``B.dateTime, A.dateTime``) could not be told apart in it."""
    seen: set[str] = set()
    for item in query.expressions if isinstance(query, exp.Select) else []:
        name = item.alias_or_name.lower()
        if name and name in seen and not item.is_star:
            raise SqlError(
                f"two result columns are named {item.alias_or_name}",
                *position(item),
                f"Give one of them another name: ... AS other_{item.alias_or_name}",
            )
        seen.add(name)


def _split_order(query: exp.Expression, emit: Materialization, stream: bool):
    """(the query without ORDER BY / LIMIT, those clauses) for a stream; they
    order a table view, not a changelog."""
    order, limit = query.args.get("order"), query.args.get("limit")
    if not stream or (order is None and limit is None):
        return query, None
    if emit.stream:
        line, col = position(order or limit)
        raise SqlError(
            "ORDER BY and LIMIT apply to a table view, not to a changelog (EMIT STREAM)",
            line,
            col,
            "Remove them, or drop STREAM to get the table view",
        )
    group_query = query.copy()
    group_query.set("order", None)
    group_query.set("limit", None)
    clauses = exp.Select(
        order=order.copy() if order else None, limit=limit.copy() if limit else None
    )
    return group_query, clauses
