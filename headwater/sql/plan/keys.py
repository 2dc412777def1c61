"""The maintenance key of a streaming query: what every operator that combines
rows partitions by.

A streaming query is maintained per group of rows: a group's result is the
query over the group's rows, and the whole result is the union of the groups'
results. That is exact when every operator that combines rows (an aggregate,
DISTINCT, a window function, a join of two streams, a set operation, a
subquery, a LIMIT) only combines rows of one group, i.e. when the group key is
a function of what each such operator partitions by. This module derives, from
the query's text alone (planning never reads data), the columns each combining
operator partitions by, traced through aliases, subqueries and CTEs back to the
streams' columns (``window_start AS starttime`` is still the window start), and
the query's key: the parts common to all of them.

A key part is the window (window bounds: groups are windows, freed by the
watermark), the event time (groups are instants, freed by the watermark), a
bucket of the event time (``CAST(ts AS DATE)``: groups are its days, freed by the
watermark as tumbling windows; :mod:`headwater.sql.plan.buckets`; operators by
buckets of sizes that nest, an hour inside a day, are kept per the coarsest), or a plain
column of every stream (groups are that column's values, kept forever:
state grows with the distinct values). No part at all is one group holding
every row. A query with no combining operator is exact per row.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import interval_ms, interval_sql
from headwater.sql.parse.dialect import Headwater, WindowTVF, position
from headwater.sql.plan import buckets
from headwater.sql.plan.catalog import Catalog, Table
from headwater.sql.plan.translate import window_names

#: Names of the window columns the TVFs add (the paper's, then Flink's).
WINDOW_COLUMNS = frozenset({"wstart", "wend", "window_start", "window_end", "window_time"})


# ------------------------------------------------------------------ origins


@dataclass(frozen=True)
class StreamColumn:
    """A column of a stream as it arrives (``event_time``: the stream's event time)."""

    table: str
    column: str
    event_time: bool = False


@dataclass(frozen=True)
class WindowBounds:
    """The bounds of a row's window (any of start, end, window_time names the
    window); ``edge`` says which one a column is (``start``, ``end``, ``time``;
    empty in a key: the window)."""

    edge: str = ""


@dataclass(frozen=True)
class NullSide:
    """Read from the NULL-padded side of an outer join: its unmatched rows are NULL
    there, whatever their key, so partitioning by it is by no key."""


@dataclass(frozen=True)
class EventBucket:
    """A bucket of ``size`` ms of stream ``table``'s event time (``CAST(ts AS
    DATE)``: its day), aligned to the epoch."""

    table: str
    size: int


Origin = StreamColumn | WindowBounds | NullSide | EventBucket
WINDOW = WindowBounds()
NULL_SIDE = NullSide()
_EDGES = {
    "wstart": "start",
    "window_start": "start",
    "wend": "end",
    "window_end": "end",
    "window_time": "time",
}


class KeyKind(enum.Enum):
    """How a query's groups are formed, from the key's parts."""

    ROW = "row"  #: no combining operator: each row (event time) on its own
    WINDOW = "window"  #: the windows of the windowing TVF
    EVENT_TIME = "event time"  #: each event time on its own
    BUCKET = "event-time bucket"  #: buckets of the event time (its days): tumbling windows
    COLUMNS = "columns"  #: the values of plain columns of every stream
    NONE = "none"  #: one group holding every row


@dataclass(frozen=True)
class KeyPart:
    """One part of a key: per stream (table name, lower case), the column it is."""

    columns: tuple[tuple[str, str], ...]

    def column_of(self, table: str) -> str:
        return dict(self.columns)[table.lower()]

    def describe(self) -> str:
        names = dict.fromkeys(f"{t}.{c}" for t, c in self.columns)
        return " = ".join(names)


@dataclass(frozen=True)
class Partition:
    """What one combining operator partitions by: its origins, as written (a
    partition item traced to several origins, e.g. through a UNION, lists all)."""

    operator: str
    node: exp.Expression
    items: tuple[frozenset[Origin], ...]


@dataclass(frozen=True)
class MaintenanceKey:
    """The query's key: its kind and, for ``COLUMNS``, the parts (a column of each
    stream per part); ``operators``: the combining operators found."""

    kind: KeyKind
    parts: tuple[KeyPart, ...] = ()
    operators: tuple[str, ...] = ()
    #: the state time-to-live (ms) bounding a key's state the watermark does not
    #: free (:mod:`headwater.sql.plan.ttl`); None: kept while the query runs
    ttl: int | None = None
    #: ``BUCKET``: the buckets' size (ms), and how the query writes the bucket
    bucket: int = 0
    bucket_text: str = ""

    @property
    def freed_by_watermark(self) -> bool:
        """Whether groups complete (their state is freed by the watermark)."""
        return self.kind in (KeyKind.ROW, KeyKind.WINDOW, KeyKind.EVENT_TIME, KeyKind.BUCKET)

    @property
    def expiring(self) -> int | None:
        """The TTL (ms) that drops idle keys' state: None where the watermark frees
        the state (a TTL does not change it) or no TTL was asked for."""
        return None if self.freed_by_watermark else self.ttl

    def columns_of(self, table: str) -> tuple[str, ...]:
        """The model key columns of stream ``table`` (``COLUMNS`` only)."""
        return tuple(p.column_of(table) for p in self.parts)

    def describe(self) -> str:
        """The key and how its state grows (``explain()``)."""
        if self.kind is KeyKind.COLUMNS:
            cols = ", ".join(p.describe() for p in self.parts)
            if self.ttl is not None:
                return f"key {cols}: {self._bounded('a value')}"
            return f"key {cols}: state grows with the distinct values of {cols}"
        if self.kind is KeyKind.NONE:
            if self.ttl is not None:
                return f"no key (one group of every row): {self._bounded('the group')}"
            return "no key (one group of every row): state grows with the rows"
        what = {
            KeyKind.ROW: "each row on its own (no operator combines rows)",
            KeyKind.WINDOW: "key the window bounds",
            KeyKind.EVENT_TIME: "key the event time",
            KeyKind.BUCKET: f"key the event time's {buckets.describe(self.bucket)} "
            f"({self.bucket_text}, a tumbling window of one {buckets.describe(self.bucket)})",
        }[self.kind]
        if self.kind in (KeyKind.WINDOW, KeyKind.BUCKET) and self.parts:
            what += " and " + ", ".join(p.describe() for p in self.parts)
        unused = f" (state.ttl = {interval_sql(self.ttl)} does not apply)" if self.ttl else ""
        return f"{what}: state freed by the watermark{unused}"

    def _bounded(self, what: str) -> str:
        ttl = interval_sql(self.ttl or 0)
        return (
            f"state bounded by state.ttl = {ttl} ({what}'s state is dropped, and its result "
            "withdrawn, once no row of it arrived for that long in processing time)"
        )


# ------------------------------------------------------------------ scopes


@dataclass(frozen=True)
class _Source:
    """One FROM/JOIN item of a SELECT: a stream or table, a TVF over one, or a
    subquery (or CTE) with its query."""

    alias: str
    table: Table | None = None
    tvf: WindowTVF | None = None
    query: exp.Expression | None = None


class _Tracer:
    """Column origins and operator partitions of one query."""

    def __init__(self, query: exp.Expression, catalog: Catalog, size: int | None) -> None:
        self.query = query
        self.catalog = catalog
        #: the windows' size (ms; of cumulating windows the shortest, the step: a
        #: window bound is checked against it; None for sessions, of no fixed size)
        self.size = size
        self.ctes = {c.alias_or_name.lower(): c.this for c in query.find_all(exp.CTE)}
        #: reading a join's own condition (its padded side is not NULL there)
        self.in_join = False

    # -- sources
    def sources(self, select: exp.Select) -> list[_Source]:
        parts = [select.args.get("from_"), *(select.args.get("joins") or [])]
        return [s for part in parts if part is not None for s in [self._source(part.this)] if s]

    def _source(self, node: exp.Expression) -> _Source | None:
        if isinstance(node, WindowTVF):
            table = self.catalog.get(node.this.name, node.this)
            return _Source(alias=(node.alias or node.this.name).lower(), table=table, tvf=node)
        if isinstance(node, exp.Table):
            name = node.name.lower()
            alias = node.alias_or_name.lower()
            if name in self.ctes:
                return _Source(alias=alias, query=self.ctes[name])
            return _Source(alias=alias, table=self.catalog.get(node.name, node))
        if isinstance(node, exp.Subquery):
            return _Source(alias=node.alias_or_name.lower(), query=node.this)
        return None

    def source_of(self, tvf: WindowTVF) -> _Source:
        """The source a windowing TVF reads (its table's columns)."""
        return _Source(alias="", table=self.catalog.get(tvf.this.name, tvf.this))

    def columns(self, source: _Source) -> list[str]:
        if source.query is not None:
            return _output_names(source.query)
        names = list(source.table.columns) if source.table is not None else []
        if source.tvf is not None:
            names += list(window_names(source.tvf))
        return names

    # -- origins
    def origins(self, column: exp.Column, select: exp.Select) -> frozenset[Origin]:
        """Where ``column`` (read in ``select``, or an enclosing one) comes from."""
        scope: exp.Expression | None = select
        while scope is not None:
            if isinstance(scope, exp.Select):
                found = self._in_select(column, scope)
                if found is not None:
                    return found
            scope = scope.parent
        return frozenset()

    def is_local(self, column: exp.Column, select: exp.Select) -> bool:
        """Whether ``column`` is one of ``select``'s own sources' (not an outer row's)."""
        return self._in_select(column, select) is not None

    def _in_select(self, column: exp.Column, select: exp.Select) -> frozenset[Origin] | None:
        qualifier = column.table.lower()
        name = column.name.lower()
        matches = [
            s
            for s in self.sources(select)
            if (s.alias == qualifier if qualifier else name in map(str.lower, self.columns(s)))
        ]
        if len(matches) != 1:
            return None if not matches else frozenset()
        found = self.of_source(matches[0], name)
        if not self.in_join and matches[0].alias in _padded(select):
            return found | {NULL_SIDE}
        return found

    def of_source(self, source: _Source, name: str) -> frozenset[Origin]:
        if source.tvf is not None and name in WINDOW_COLUMNS:
            return frozenset({WindowBounds(_EDGES[name])})
        if source.table is not None:
            table = source.table
            if not table.is_stream:
                return frozenset()
            column = next((c for c in table.columns if c.lower() == name), None)
            if column is None:
                return frozenset()
            return frozenset({StreamColumn(table.name.lower(), column, column == table.event_time)})
        return self.output(source.query, name)

    def output(self, query: exp.Expression, name: str) -> frozenset[Origin]:
        """Origins of the output column ``name`` of a subquery (every branch of a
        set operation)."""
        if isinstance(query, exp.SetOperation):
            position = _output_names(query).index(name) if name in _output_names(query) else -1
            if position < 0:
                return frozenset()
            found: set[Origin] = set()
            for branch in (query.this, query.expression):
                names = _output_names(branch)
                mine = self.output(branch, names[position]) if position < len(names) else None
                if not mine:
                    return frozenset()  # a branch's rows come from no column: no key
                found |= mine
            return frozenset(found)
        if isinstance(query, exp.Subquery):
            return self.output(query.this, name)
        if not isinstance(query, exp.Select):
            return frozenset()
        for item in query.expressions:
            if isinstance(item, exp.Star):
                for source in self.sources(query):
                    if name in map(str.lower, self.columns(source)):
                        return self.of_source(source, name)
            elif item.alias_or_name.lower() == name:
                return self.expression(item, query)
        return frozenset()

    def expression(self, node: exp.Expression, select: exp.Select) -> frozenset[Origin]:
        """Origins of a plain column (aliased or in parentheses), or of a bucket of
        an event time; another expression over columns has none (it is coarser
        than its columns: not a key)."""
        while isinstance(node, exp.Alias | exp.Paren):
            node = node.this
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            return self.origins(node, select)
        bucket = buckets.bucket_of(node)
        if bucket is not None:
            return self._bucket(bucket[0], self.expression(bucket[1], select))
        return frozenset()

    def _bucket(self, size: int, of: frozenset[Origin]) -> frozenset[Origin]:
        """The bucket of ``size`` of a value from ``of``: of a stream's event time (a
        TIMESTAMP), or a coarser bucket of a bucket (the day of an hour)."""
        found: set[Origin] = set()
        for origin in of:
            if isinstance(origin, EventBucket) and size % origin.size == 0:
                found.add(EventBucket(origin.table, size))
            elif isinstance(origin, StreamColumn) and origin.event_time and self._timestamp(origin):
                found.add(EventBucket(origin.table, size))
            else:
                return frozenset()
        return frozenset(found)

    def _timestamp(self, column: StreamColumn) -> bool:
        types = self.catalog.get(column.table).arrow_types()
        return pa.types.is_timestamp(types.get(column.column, pa.null()))


def _padded(select: exp.Select) -> set[str]:
    """Aliases of ``select``'s sources that an outer join pads with NULLs."""
    parts = [select.args.get("from_"), *(select.args.get("joins") or [])]
    names = [p.this.alias_or_name.lower() for p in parts if p is not None]
    padded: set[str] = set()
    for i, join in enumerate(parts[1:], start=1):
        side = (join.args.get("side") or "").upper()
        if side in ("LEFT", "FULL"):
            padded.add(names[i])
        if side in ("RIGHT", "FULL"):
            padded.update(names[:i])
    return padded


def _output_names(query: exp.Expression) -> list[str]:
    if isinstance(query, exp.SetOperation):
        return _output_names(query.this)
    if isinstance(query, exp.Subquery):
        return _output_names(query.this)
    if isinstance(query, exp.Select):
        return [e.alias_or_name.lower() for e in query.expressions]
    return []


# ------------------------------------------------------------------ operators


def _conjuncts(node: exp.Expression | None) -> Iterator[exp.Expression]:
    if node is None:
        return
    if isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    elif isinstance(node, exp.Paren):
        yield from _conjuncts(node.this)
    else:
        yield node


def _reads_stream(node: exp.Expression, tracer: _Tracer, seen=frozenset()) -> bool:
    """Whether ``node`` reads a stream (through TVFs, subqueries, CTEs)."""
    for table in node.find_all(exp.Table):
        name = table.name.lower()
        if name in tracer.ctes:
            if name not in seen and _reads_stream(tracer.ctes[name], tracer, seen | {name}):
                return True
        elif tracer.catalog.get(table.name, table).is_stream:
            return True
    return False


def _enclosing_select(node: exp.Expression) -> exp.Select | None:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        parent = parent.parent
    return parent


def _item(tracer: _Tracer, node: exp.Expression, select: exp.Select) -> frozenset[Origin]:
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


def _select_partitions(tracer: _Tracer, select: exp.Select) -> Iterator[Partition]:
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
    yield from _join_partitions(tracer, select)
    if select.args.get("limit") is not None or select.args.get("offset") is not None:
        if select is not tracer.query:
            yield Partition("LIMIT", select.args.get("limit") or select, ())


def _join_partitions(tracer: _Tracer, select: exp.Select) -> Iterator[Partition]:
    """A join of stream-reading sides partitions by its equalities (ON and WHERE)
    and, when a raw stream's event time is bounded by a window, by the window."""
    joins = select.args.get("joins") or []
    sides = [select.args.get("from_"), *joins]
    reading = [s for s in sides if s is not None and _reads_stream(s, tracer)]
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


def _equalities(tracer: _Tracer, select: exp.Select, conditions) -> list[frozenset[Origin]]:
    """The column equalities among ``conditions``' conjuncts, as origins."""
    items = []
    for cond in conditions:
        for part in _conjuncts(cond):
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


def _window_bounded(tracer: _Tracer, select: exp.Select, conditions) -> bool:
    """Whether the conditions bound an event time to its window's rows from below
    and above (``B.bidtime >= W.wstart AND B.bidtime < W.wend``, or tighter:
    ``>= W.wend - INTERVAL '10' MINUTE`` of 10-minute windows)."""
    found = set()
    for cond in conditions:
        for part in _conjuncts(cond):
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


def _offset(tracer: _Tracer, node, select) -> int | None:
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


def _is_event_time(tracer: _Tracer, node, select) -> bool:
    origins = tracer.expression(node, select) if node is not None else frozenset()
    return any(isinstance(o, StreamColumn) and o.event_time for o in origins)


def _set_partitions(tracer: _Tracer, node: exp.SetOperation) -> Iterator[Partition]:
    """A set operation that removes duplicates (UNION, INTERSECT, EXCEPT)
    partitions by every output column, position by position."""
    if isinstance(node, exp.Union) and not node.args.get("distinct"):
        return
    if not _reads_stream(node, tracer):
        return
    names = _output_names(node)
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


def _correlations(tracer: _Tracer, select: exp.Select) -> list[frozenset[Origin]]:
    """A subquery's equalities between its own columns and the outer row's
    (``A.item = B.item``): the subquery combines the outer row with these rows."""
    where = select.args.get("where")
    found = []
    for part in _conjuncts(where.this if where is not None else None):
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


def _subquery_partitions(tracer: _Tracer, select: exp.Select) -> Iterator[Partition]:
    """A subquery in an expression (IN, EXISTS, a scalar subquery) over a stream
    combines the outer row with the subquery's rows: by its correlations and, for
    ``x IN (SELECT y ...)``, by ``x = y``."""
    context = _expression_subquery(select)
    if context is None or not _reads_stream(select, tracer):
        return
    items = _correlations(tracer, select)
    outer = _enclosing_select(context)
    if isinstance(context, exp.In) and outer is not None and len(select.expressions) == 1:
        left = tracer.expression(context.this, outer)
        right = tracer.expression(select.expressions[0], select)
        if left and right:
            items.append(left | right)
    yield Partition("subquery", context, tuple(items))


def _session_partition(tracer: _Tracer, tvf: WindowTVF) -> Partition | None:
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
    tracer = _Tracer(query, catalog, size)
    found: list[Partition] = [_session_partition(tracer, t) for t in query.find_all(WindowTVF)]
    found = [p for p in found if p is not None]
    for node in query.find_all(exp.Select, exp.SetOperation):
        if isinstance(node, exp.SetOperation):
            found += _set_partitions(tracer, node)
            continue
        if not _reads_stream(node, tracer):
            continue
        found += _select_partitions(tracer, node)
        found += _subquery_partitions(tracer, node)
    return found


# ------------------------------------------------------------------ the key


class _Classes:
    """Origins equal by the query's equalities (union-find)."""

    def __init__(self) -> None:
        self.parent: dict[Origin, Origin] = {}

    def find(self, origin: Origin) -> Origin:
        self.parent.setdefault(origin, origin)
        while self.parent[origin] != origin:
            origin = self.parent[origin]
        return origin

    def union(self, origins: frozenset[Origin]) -> None:
        roots = [self.find(o) for o in origins]
        for other in roots[1:]:
            self.parent[self.find(other)] = self.find(roots[0])

    def members(self, root: Origin) -> set[Origin]:
        return {o for o in self.parent if self.find(o) == root}


def _stream_refs(query: exp.Expression, catalog: Catalog) -> dict[str, Table]:
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    refs = [t for t in query.find_all(exp.Table) if t.name and t.name.lower() not in ctes]
    tables = (catalog.get(t.name, t) for t in refs)
    return {t.name.lower(): t for t in tables if t.is_stream}


def derive_key(
    query: exp.Expression, catalog: Catalog, windowed: bool, size: int | None = None
) -> MaintenanceKey:
    """The maintenance key of ``query``. ``windowed``: every stream reference is
    read through a windowing TVF or bounded by a window (so that each stream row
    belongs to the windows of its event time); ``size``: the windows' (ms)."""
    found = partitions(query, catalog, size)
    names = tuple(dict.fromkeys(p.operator for p in found))
    if not found:
        return MaintenanceKey(KeyKind.ROW)
    classes = _Classes()
    items = [
        [_window_as_one(item) for item in p.items if item and NULL_SIDE not in item] for p in found
    ]
    for mine in items:
        for item in mine:
            classes.union(item)
    roots = [{classes.find(next(iter(item))) for item in mine} for mine in items]
    common = set.intersection(*roots)
    streams = _stream_refs(query, catalog)
    members = [classes.members(c) for c in common]
    parts = sorted(
        (p for p in (_part(m, streams) for m in members) if p is not None),
        key=lambda p: p.columns,
    )
    if windowed and any(WINDOW in m for m in members):
        # the columns, if any, spread a window's groups over keys (Hop windows)
        return MaintenanceKey(KeyKind.WINDOW, tuple(parts), names)
    if any(_all_event_times(p, streams) for p in parts):
        return MaintenanceKey(KeyKind.EVENT_TIME, operators=names)
    bucket = max((_bucket(m, streams) for m in members), default=0)
    bucket = bucket or _nested_bucket(
        [[classes.members(r) for r in mine] for mine in roots], streams
    )
    if bucket:
        text = _bucket_text([*(p.node for p in found), query], bucket)
        return MaintenanceKey(KeyKind.BUCKET, tuple(parts), names, bucket=bucket, bucket_text=text)
    if parts:
        return MaintenanceKey(KeyKind.COLUMNS, tuple(parts), names)
    return MaintenanceKey(KeyKind.NONE, operators=names)


def _window_as_one(item: frozenset[Origin]) -> frozenset[Origin]:
    """A partition item with every window bound as the window (one class)."""
    return frozenset(WINDOW if isinstance(o, WindowBounds) else o for o in item)


def _part(members: set[Origin], streams: dict[str, Table]) -> KeyPart | None:
    """A key part: exactly one column of every stream in the class (else rows of
    a stream could not be given one group)."""
    columns = [m for m in members if isinstance(m, StreamColumn)]
    chosen = []
    for name in sorted(streams):
        mine = {m.column for m in columns if m.table == name}
        if len(mine) != 1:
            return None
        chosen.append((name, mine.pop()))
    return KeyPart(tuple(chosen)) if chosen else None


def _bucket(members: set[Origin], streams: dict[str, Table]) -> int:
    """The size of the buckets of a class of buckets only, one of every stream's
    event time, all of one size (0: not such a class)."""
    found = {(m.table, m.size) for m in members if isinstance(m, EventBucket)}
    if len(found) != len(members) or {t for t, _ in found} != set(streams):
        return 0
    sizes = {s for _, s in found}
    return sizes.pop() if len(sizes) == 1 else 0


def _nested_bucket(operators: list[list[set[Origin]]], streams: dict[str, Table]) -> int:
    """Buckets of several sizes (an hour inside, the day outside): when every
    operator partitions by a bucket of every stream's event time, and each
    operator's finest bucket divides the coarsest of them, a group of the coarsest
    bucket holds every row of each operator's partitions (a day's rows hold all
    its hours): its size, else 0. ``operators``: each one's classes of origins."""
    finest = []
    for classes in operators:
        sizes = [size for size in (_bucket(c, streams) for c in classes) if size]
        if not sizes:
            return 0
        finest.append(min(sizes))
    coarsest = max(finest, default=0)
    return coarsest if all(coarsest % size == 0 for size in finest) else 0


def _bucket_text(nodes: list[exp.Expression], size: int) -> str:
    """How the query writes its bucket key: the first bucket expression of that
    size in the combining operators, else in the query."""
    for node in (n for top in nodes for n in top.walk()):
        bucket = buckets.bucket_of(node)
        if bucket is not None and bucket[0] == size:
            return buckets.written(node, Headwater)
    return buckets.describe(size)


def _all_event_times(part: KeyPart, streams: dict[str, Table]) -> bool:
    return all(streams[t].event_time == c for t, c in part.columns)
