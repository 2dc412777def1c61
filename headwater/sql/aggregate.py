"""The fast path of a plain windowed aggregate: real combiners, one vectorized
projection per step.

The general path (:mod:`headwater.sql.local`, :mod:`headwater.sql.maintain`)
keeps every row of an event-time group and recomputes a fired group's result
with one DuckDB call per group: exact for joins and Top-N, slow for a big
windowed aggregate. A query of the shape

    SELECT <group columns, aggregates, scalar expressions of them>
    FROM Tumble(data => TABLE(s), ...) | Hop(...) | s
    [WHERE <row condition>]
    GROUP BY <window bounds>, <columns of s>
    [HAVING <condition over group columns and aggregates>]

over one stream ``s`` (no join, subquery, DISTINCT or window function; a raw
stream grouped by its event-time column) runs here instead:

1. **pre-projection**, row-wise, before the model: the GROUP BY columns as the
   model's key (one column: itself; several: a JSON object), the event time,
   ``WHERE`` as a flag and every aggregate's argument (``NULL`` where the row
   fails ``WHERE``: the row still reaches its group, so that triggers, lateness
   and dead letters see exactly the rows the general path sees). DuckDB over
   the rows locally, Spark SQL expressions on a streaming DataFrame on Spark.
2. **the model**: one windowed plan keyed by the GROUP BY columns with real
   combiners (``Sum``, ``Count``, ``Min``, ``Max``, ``CountDistinct``; ``AVG`` is
   a sum and a non-null count), so a group's state is its accumulators.
3. **a pane transform** (:class:`AggregateMaintainer`) that turns ALL panes
   fired in a step into result rows with ONE DuckDB query (the select list and
   ``HAVING`` over the pane frame, each aggregate cast to the type DuckDB gives
   it in the general path) and diffs them with what each group materialized
   last into the changelog (:class:`GroupRows`: the changelog of
   :class:`~headwater.sql.changelog.Materializer` for groups of one row).

The event-time group of the fast path is (GROUP BY columns, window): ``ver``
counts the changelog rows of such a group, and ``EMIT AFTER DELAY`` delays
each one on its own. For a query grouped by the window alone this is the
general path's group; with more GROUP BY columns the general path groups by
the window (use ``general_path()`` and a plan whose ``keys`` are the GROUP BY
columns to compare them). Sessions stay on the general path.

Dead letters of the fast path carry the query, table, reason, window, the
GROUP BY columns and the event time (the other columns of a dropped row are
not kept).
"""

from __future__ import annotations

import contextlib
import io
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from sqlglot import exp

from headwater.model.combiners import CombineFn, Count, CountDistinct, Max, Min, Sum
from headwater.model.panes import Accumulation
from headwater.model.reducer import Reducer
from headwater.model.schema import DropReason, Field
from headwater.model.steps import Bundle, MicroBatch, apply_step
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MIN_TIMESTAMP
from headwater.model.types import BOOLEAN, INT64, STRING
from headwater.sql.catalog import PTIME, Table, event_millis
from headwater.sql.changelog import CHANGE_COLUMNS, GROUP_COLUMNS, in_order
from headwater.sql.dialect import WindowTVF
from headwater.sql.errors import SqlError
from headwater.sql.maintain import _logical
from headwater.sql.planner import QueryPlan
from headwater.sql.translate import GROUP_RELATION, to_engine_sql, window_names

#: Columns of the pre-projected rows (the model's input).
KEY, ET, KEEP = "__gkey", "__et", "__keep"
#: The relation a step's panes are registered as in the projection query.
PANES = "__panes"
#: The matched-row count of a group (a query with WHERE): a group of no
#: matching row has no result row.
ROWS = "__rows"
#: ``__gk`` of a query whose only group columns are the window bounds (as the
#: general path's).
NO_KEY = "0"
#: Version of the transform's snapshot layout.
SNAPSHOT_VERSION = 1

_ENABLED = [True]


@contextlib.contextmanager
def general_path() -> Iterator[None]:
    """Within this block every query compiles to the general path (tests compare)."""
    _ENABLED.append(False)
    try:
        yield
    finally:
        _ENABLED.pop()


def enabled() -> bool:
    return _ENABLED[-1]


# ------------------------------------------------------------------ analysis


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


_AGGREGATES = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)


def _bare(node: exp.Expression) -> exp.Expression:
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
    query = plan.group_query
    if not plan.is_stream or len(plan.streams) != 1 or plan.tables:
        return "it reads more than one table"
    if not isinstance(query, exp.Select):
        return "it is not a single SELECT"
    for arg in ("with_", "joins", "laterals", "distinct", "qualify", "windows", "pivots"):
        if query.args.get(arg):
            return f"it has {arg.rstrip('_').upper()}"
    stream = plan.streams[0]
    source = query.args.get("from_")
    source = source.this if source is not None else None
    tvf = source if isinstance(source, WindowTVF) else None
    table = tvf.this if tvf is not None else source
    if not isinstance(table, exp.Table) or table.name.lower() != stream.name.lower():
        return "FROM is not the stream or one windowing table function over it"
    if tvf is not None and tvf.args["kind"] == "SESSION":
        return "session windows merge (the general path maintains them)"
    group = query.args.get("group")
    if group is None or not group.expressions:
        return "it has no GROUP BY"
    for node in query.find_all(exp.Subquery, exp.Exists, exp.Window, exp.Star):
        if isinstance(node, exp.Star) and isinstance(node.parent, exp.Count):
            continue
        return f"it has {type(node).__name__.upper()}"
    if any(s is not query for s in query.find_all(exp.Select)):
        return "it has a subquery"
    columns = {c.lower(): c for c in stream.columns}
    windows: dict[str, str] = {}
    if tvf is not None:
        names = window_names(tvf)
        windows = dict(zip(names, ("start", "end", "time"), strict=False))
    lower_windows = {n.lower(): n for n in windows}

    for arg in ("rollup", "cube", "grouping_sets", "totals"):
        if group.args.get(arg):
            return f"GROUP BY {arg.upper()}"
    plain: list[str] = []
    has_window = False
    for item in group.expressions:
        if not isinstance(item, exp.Column):
            return "a GROUP BY item is not a column"
        name = item.name.lower()
        if name in lower_windows:
            has_window = True
        elif name in columns:
            if columns[name] not in plain:
                plain.append(columns[name])
        else:
            return f"GROUP BY {item.name}: not a column of {stream.name}"
    if tvf is not None and not has_window:
        return "GROUP BY has no window bound"
    if tvf is None and (stream.event_time or "").lower() not in {p.lower() for p in plain}:
        return "GROUP BY has no event-time column"
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
        where=_bare(where) if where is not None else None,
        items=tuple(query.expressions),
        having=_bare(having) if having is not None else None,
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
        if not isinstance(agg, _AGGREGATES):
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


# ------------------------------------------------------------------ types


def stream_schema(table: Table) -> pa.Schema:
    """The Arrow types a stream's rows have in the queries of both paths (the
    general path's: timestamps in ms, see :meth:`Table.arrow_types`)."""
    return pa.schema([pa.field(c, t) for c, t in table.arrow_types().items()])


def _key_kind(t: pa.DataType) -> str | None:
    """How a GROUP BY column travels in the key: its own value, epoch ms, or None
    (a type the fast path does not key by)."""
    if pa.types.is_timestamp(t):
        return "ms"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t):
        return "value"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "value"
    return None


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Call:
    """One model aggregation: ``kind`` of the pre-projected column ``arg``."""

    name: str
    kind: str  # sum | count | count_star | count_distinct | min | max
    arg: str | None
    timestamp: bool = False  # min/max of a timestamp, carried as epoch ms

    def combiner(self) -> CombineFn:
        return {
            "sum": Sum,
            "count": lambda: Count(skip_nulls=True),
            "count_star": Count,
            "count_distinct": CountDistinct,
            "min": Min,
            "max": Max,
        }[self.kind]()


@dataclass(frozen=True)
class Projection:
    """The row-wise part of the query: the expressions each engine evaluates."""

    key: dict[str, str]  # engine -> key expression ('' : no key)
    keep: dict[str, str]  # engine -> WHERE flag expression ('' : no WHERE)
    args: dict[str, dict[str, str]]  # engine -> arg column -> expression

    def select(self, engine: str) -> list[str]:
        """``expr AS name`` items (the event time is added by each runner)."""
        out = []
        if self.key[engine]:
            out.append(f"{self.key[engine]} AS {KEY}")
        if self.keep[engine]:
            out.append(f"{self.keep[engine]} AS {KEEP}")
        out += [f"{e} AS {name}" for name, e in self.args[engine].items()]
        return out


@dataclass(frozen=True)
class AggregatePlan:
    """A windowed aggregate as the fast path runs it (the counterpart of
    :class:`~headwater.sql.local.SqlPlan`): the pre-projection, the model's
    windowing and combiners over it, and the transform of its panes."""

    query: QueryPlan
    shape: Shape
    schema: pa.Schema
    strategy: WindowingStrategy
    aggregations: dict[str, tuple[CombineFn, str | None]]
    projection: Projection
    maintainer: AggregateMaintainer

    @property
    def keys(self) -> tuple[str, ...]:
        return (KEY,) if self.shape.group else ()

    def run_local(self, steps_of, as_of: int | None = None):
        """Replay the stream in this process (see :func:`run_local`)."""
        return run_local(self, steps_of, as_of)

    @property
    def inputs(self) -> list[str]:
        """Pre-projected value columns the combiners read."""
        cols = [KEEP] if self.shape.where is not None else []
        return cols + list(self.projection.args["duckdb"])


def try_compile(plan: QueryPlan) -> AggregatePlan | None:
    """The fast-path plan of ``plan``, or None when the general path must run it
    (not a plain windowed aggregate, or a query the general path reports on)."""
    if why_not(plan) is not None:
        return None
    try:
        return compile_aggregate(plan)
    except SqlError:
        return None


def compile_aggregate(plan: QueryPlan) -> AggregatePlan:
    """The fast-path plan of ``plan`` (SqlError if it is not a plain aggregate)."""
    shape = analyze_shape(plan)
    if isinstance(shape, str):
        raise SqlError(f"not a plain windowed aggregate: {shape}")
    schema = stream_schema(shape.stream)
    types = {f.name.lower(): f.type for f in schema}
    for column in shape.group:
        if _key_kind(types[column.lower()]) is None:
            raise SqlError(f"GROUP BY {column}: a {types[column.lower()]} column is not a key")
    where = shape.where
    args: dict[str, exp.Expression] = {}  # arg column -> expression
    arg_of: dict[str, str] = {}  # expression SQL -> arg column
    calls: dict[tuple, Call] = {}
    replacement: dict[str, tuple[str, ...]] = {}  # aggregate SQL -> its calls

    def arg(node: exp.Expression) -> str:
        node = _bare(node)
        text = node.sql()
        if text not in arg_of:
            arg_of[text] = f"__x{len(arg_of)}"
            args[arg_of[text]] = node
        return arg_of[text]

    def call(kind: str, column: str | None, timestamp: bool = False) -> str:
        spec = (kind, column)
        if spec not in calls:
            calls[spec] = Call(f"__a{len(calls)}", kind, column, timestamp)
        return calls[spec].name

    empty = pa.table({f.name: pa.nulls(0, f.type) for f in schema})
    con = duckdb.connect()
    con.register(shape.stream.name, empty)

    def arg_type(column: str) -> pa.DataType:
        text = args[column].sql(dialect="duckdb")
        return con.sql(f'SELECT {text} FROM "{shape.stream.name}"').arrow().schema.types[0]

    aggregates: list[exp.AggFunc] = []
    for part in (*shape.items, shape.having):
        if part is not None:
            aggregates += [a for a in part.find_all(exp.AggFunc) if isinstance(a, _AGGREGATES)]
    for agg in aggregates:
        text = _bare(agg).sql()
        if text in replacement:
            continue
        inner = agg.this
        if isinstance(agg, exp.Count) and isinstance(inner, exp.Star):
            kind = "count" if where is not None else "count_star"
            replacement[text] = (call(kind, KEEP if where is not None else None),)
            continue
        if isinstance(inner, exp.Distinct):
            column = arg(inner.expressions[0])
            stamp = pa.types.is_timestamp(arg_type(column))
            replacement[text] = (call("count_distinct", column, stamp),)
            continue
        column = arg(inner)
        stamp = pa.types.is_timestamp(arg_type(column))
        if isinstance(agg, exp.Avg):
            replacement[text] = (call("sum", column), call("count", column))
        else:
            kind = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}
            replacement[text] = (call(kind[type(agg)], column, stamp),)
    if where is not None:
        call("count", KEEP)

    # -- pre-projection: each engine's expressions
    def render(node: exp.Expression, engine: str) -> str:
        return node.sql(dialect=engine)

    def masked(node: exp.Expression, engine: str) -> str:
        text = render(node, engine)
        if where is None:
            return text
        return f"CASE WHEN {render(where, engine)} THEN {text} END"

    millis = {"duckdb": "epoch_ms({})", "spark": "unix_millis({})"}
    key: dict[str, str] = {}
    for engine in ("duckdb", "spark"):
        parts = []
        for column in shape.group:
            ref = exp.column(column, quoted=True).sql(dialect=engine)
            if _key_kind(types[column.lower()]) == "ms":
                ref = millis[engine].format(ref)
            parts.append(ref)
        if not parts:
            key[engine] = ""
        elif len(parts) == 1:
            key[engine] = parts[0]
        elif engine == "duckdb":
            fields = ", ".join(f"k{i} := {p}" for i, p in enumerate(parts))
            key[engine] = f"to_json(struct_pack({fields}))"
        else:
            fields = ", ".join(f"'k{i}', {p}" for i, p in enumerate(parts))
            key[engine] = f"to_json(named_struct({fields}))"
    arg_sql = {}
    for engine in ("duckdb", "spark"):
        out = {}
        for name, node in args.items():
            text = masked(node, engine)
            if pa.types.is_timestamp(arg_type(name)):
                text = millis[engine].format(text)
            out[name] = text
        arg_sql[engine] = out
    keep = {e: f"CASE WHEN {render(where, e)} THEN 1 END" if where is not None else "" for e in key}
    projection = Projection(key=key, keep=keep, args=arg_sql)

    aggregations = {c.name: (c.combiner(), c.arg) for c in calls.values()}
    strategy = WindowingStrategy(
        window_fn=plan.window_fn,
        trigger=plan.emit.trigger(),
        accumulation=Accumulation.ACCUMULATING,
        allowed_lateness=plan.allowed_lateness,
        retention=plan.emit.retention(),
    )
    maintainer = AggregateMaintainer.build(
        plan,
        shape,
        schema,
        list(calls.values()),
        replacement,
        strategy.allowed_lateness + strategy.retention,
    )
    return AggregatePlan(plan, shape, schema, strategy, aggregations, projection, maintainer)


# ------------------------------------------------------------------ the transform


_AT = "__hw_at"


class GroupRows:
    """What each group materialized last and its next ``ver``: the changelog of a
    windowed aggregate, whose groups have at most ONE result row each.

    The same changelog as :class:`~headwater.sql.changelog.Materializer` (a
    fired group whose row changed withdraws the old row, then adds the new; an
    unchanged one adds nothing; ``ver`` continues per group), computed with a
    few merges per step instead of a multiset difference over every group.
    """

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)
        #: the materialized row of every group that has one (GROUP_COLUMNS + columns)
        self.rows: pd.DataFrame | None = None
        #: the next ``ver`` of every group that has changed (GROUP_COLUMNS + ver)
        self.versions: pd.DataFrame | None = None

    def _empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS])

    def apply(self, fired: pd.DataFrame, results: pd.DataFrame, ptime: int) -> pd.DataFrame:
        """The changelog rows of one firing: ``fired`` groups (GROUP_COLUMNS, unique)
        and their result rows (GROUP_COLUMNS + the query's columns; none for a
        group HAVING filtered out)."""
        if not len(fired):
            return self._empty()
        group = list(GROUP_COLUMNS)
        n = len(fired)
        fired = fired[group].reset_index(drop=True)
        fired[_AT] = np.arange(n)
        new = results[[*group, *self.columns]].merge(fired, on=group)
        at_new = new[_AT].to_numpy(np.int64)
        has = np.zeros(n, dtype=bool)
        has[at_new] = True
        had = np.zeros(n, dtype=bool)
        if self.rows is not None and len(self.rows):
            marked = self.rows.merge(fired, how="left", on=group)
            hit = marked[_AT].notna().to_numpy()
            old = marked[hit]
            kept = self.rows[~hit]
            at_old = old[_AT].to_numpy(np.int64)
            had[at_old] = True
        else:
            old, kept, at_old = new.iloc[:0], None, np.zeros(0, dtype=np.int64)
        same = had & has
        if same.any():
            o = old.set_index(_AT).reindex(np.flatnonzero(same))
            w = new.set_index(_AT).reindex(np.flatnonzero(same))
            equal = np.ones(len(o), dtype=bool)
            for c in self.columns:
                a, b = o[c], w[c]
                equal &= ((a == b).fillna(False) | (a.isna() & b.isna())).to_numpy(bool)
            same[np.flatnonzero(same)[~equal]] = False
        undo, add = had & ~same, has & ~same
        ver = np.zeros(n, dtype=np.int64)
        if self.versions is not None and len(self.versions):
            marked = self.versions.merge(fired, how="left", on=group)
            hit = marked[_AT].notna().to_numpy()
            ver[marked.loc[hit, _AT].to_numpy(np.int64)] = marked.loc[hit, "ver"].to_numpy(np.int64)
            others = self.versions[~hit]
        else:
            others = None
        changed = undo | add
        self.rows = (
            pd.concat([kept, new.drop(columns=[_AT])], ignore_index=True)
            if (kept is not None and len(kept))
            else new.drop(columns=[_AT]).reset_index(drop=True)
        )
        following = ver + undo + add
        counted = following > 0
        if changed.any() or others is not None:
            bumped = fired.loc[counted, group].assign(ver=following[counted])
            parts = [others, bumped] if others is not None and len(others) else [bumped]
            self.versions = pd.concat(parts, ignore_index=True)
        if not changed.any():
            return self._empty()
        withdrawn = old[undo[at_old]]
        withdrawn = withdrawn.assign(undo=True, ver=ver[withdrawn[_AT].to_numpy(np.int64)])
        added = new[add[at_new]]
        at = added[_AT].to_numpy(np.int64)
        added = added.assign(undo=False, ver=ver[at] + undo[at])
        change = pd.concat([withdrawn, added], ignore_index=True)
        change["ptime"] = ptime
        change["ver"] = change["ver"].astype(np.int64)
        return in_order(change[[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS]])

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``."""
        for name in ("rows", "versions"):
            frame = getattr(self, name)
            if frame is not None and len(frame):
                ends = frame["__ge"].to_numpy(np.int64)
                if (ends <= horizon).any():
                    setattr(self, name, frame[ends > horizon].reset_index(drop=True))


@dataclass
class AggregateMaintainer:
    """The pane transform of the fast path: a step's panes -> the changelog.

    All fired groups of a step become result rows in one DuckDB query over the
    pane frame (group columns, window bounds, aggregates); :class:`GroupRows`
    diffs them with what each group materialized last. ``expire`` forgets groups whose windows the
    model collected (they never fire again).
    """

    name: str
    text: str  # the projection query over PANES
    columns: list[str]
    duck_types: list[str]
    arrow_types: list[pa.DataType]
    group: tuple[str, ...]
    group_types: tuple[pa.DataType, ...]
    windows: dict[str, str]
    calls: tuple[Call, ...]
    where: bool
    retention: int
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)

    @classmethod
    def build(cls, plan, shape, schema, calls, replacement, retention) -> AggregateMaintainer:
        types = {f.name.lower(): f.type for f in schema}
        group_types = tuple(types[c.lower()] for c in shape.group)
        names, duck_types, arrow_types = _reference(plan, shape, schema)
        agg_types = _aggregate_types(shape, schema, replacement)
        text = _projection_sql(shape, calls, replacement, agg_types, names, duck_types)
        return cls(
            name=plan.name,
            text=text,
            columns=names,
            duck_types=duck_types,
            arrow_types=arrow_types,
            group=shape.group,
            group_types=group_types,
            windows=shape.windows,
            calls=tuple(calls),
            where=shape.where is not None,
            retention=int(retention),
        )

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_con"] = None  # a connection does not travel; each process opens its own
        return state

    @property
    def types(self) -> dict[str, object]:
        return {c: _logical(t) for c, t in zip(self.columns, self.arrow_types, strict=True)}

    def output_fields(self) -> tuple[Field, ...]:
        group = (Field("__gk", STRING), Field("__gs", INT64), Field("__ge", INT64))
        own = tuple(Field(c, t) for c, t in self.types.items())
        change = (Field("undo", BOOLEAN), Field("ptime", INT64), Field("ver", INT64))
        return group + own + change

    # -- the pane-transform protocol: restore, apply, snapshot (and expire)
    def restore(self, blob: bytes | None) -> GroupRows:
        state = GroupRows(self.columns)
        if blob:
            version, rows, versions = pickle.loads(blob)
            if version != SNAPSHOT_VERSION:
                raise ValueError(f"SQL aggregate state of version {version}; this reads 1")
            state.rows, state.versions = rows, versions
        return state

    def snapshot(self, state: GroupRows) -> bytes:
        return pickle.dumps((SNAPSHOT_VERSION, state.rows, state.versions), protocol=5)

    def expire(self, state: GroupRows, watermark: int) -> None:
        """Forget the groups the model collected: window end + retention <= watermark."""
        if watermark > MIN_TIMESTAMP:
            state.expire(int(watermark) - self.retention)

    def apply(self, panes: pd.DataFrame, now: int, state: GroupRows) -> pd.DataFrame:
        if not len(panes):
            return state.apply(pd.DataFrame(columns=list(GROUP_COLUMNS)), None, now)
        if "is_retraction" in panes.columns:
            panes = panes[~panes["is_retraction"].astype(bool).to_numpy()]
        panes = panes.drop_duplicates(["key", "window_start", "window_end"], keep="last")
        frame = self.pane_table(panes)
        results = self._evaluate(frame)
        fired = frame.select(list(GROUP_COLUMNS)).to_pandas()
        return state.apply(fired, results, now)

    # -- one step's panes as one table, and the query over it
    def pane_table(self, panes: pd.DataFrame) -> pa.Table:
        """Group columns, window bounds and aggregates of the fired groups."""
        keys = panes["key"].to_numpy()
        starts = panes["window_start"].to_numpy(np.int64)
        ends = panes["window_end"].to_numpy(np.int64)
        columns: dict[str, pa.Array] = {
            "__gk": pa.array(_group_names(keys, bool(self.group)), pa.string()),
            "__gs": pa.array(starts, pa.int64()),
            "__ge": pa.array(ends, pa.int64()),
        }
        columns.update(self._decode(keys))
        bounds = {"start": starts, "end": ends, "time": ends - 1}
        for name, which in self.windows.items():
            columns[name] = pa.array(bounds[which].astype("datetime64[ms]"), pa.timestamp("ms"))
        for c in self.calls:
            values = pa.Array.from_pandas(panes[c.name].reset_index(drop=True))
            if c.timestamp and c.kind in ("min", "max"):
                values = pc.cast(values, pa.int64()).cast(pa.timestamp("ms"))
            columns[c.name] = values
        return pa.table(columns)

    def _decode(self, keys: np.ndarray) -> dict[str, pa.Array]:
        """The GROUP BY columns of each key (see :func:`compile_aggregate`)."""
        if not self.group:
            return {}
        carried = [pa.int64() if pa.types.is_timestamp(t) else t for t in self.group_types]
        if len(self.group) == 1:
            arrays = [pa.array(pd.Series(keys, dtype=object), carried[0], from_pandas=True)]
        else:
            text = "\n".join(keys.astype(str)).encode()
            schema = pa.schema([pa.field(f"k{i}", t) for i, t in enumerate(carried)])
            table = pa_json.read_json(
                io.BytesIO(text),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
            arrays = [table.column(f"k{i}").combine_chunks() for i in range(len(carried))]
        out = {}
        for name, array, t in zip(self.group, arrays, self.group_types, strict=True):
            out[name] = array.cast(t) if array.type != t else array
        return out

    def _evaluate(self, frame: pa.Table) -> pd.DataFrame:
        con = self._connection()
        con.register(PANES, frame)
        try:
            return con.sql(self.text).df()
        except duckdb.Error as exc:
            raise SqlError(f"query {self.name}: {str(exc).splitlines()[0]}") from None
        finally:
            con.unregister(PANES)

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = duckdb.connect()
        return self._con


def _group_names(keys: np.ndarray, keyed: bool) -> np.ndarray:
    """``__gk`` of each key: its text (NULL as a marker no value prints as)."""
    if not keyed:
        return np.full(len(keys), NO_KEY, dtype=object)
    series = pd.Series(keys, dtype=object)
    return series.astype(str).where(series.notna(), "\x00NULL").to_numpy(object)


def _reference(plan: QueryPlan, shape: Shape, schema: pa.Schema):
    """Names and types of the query's result as the general path computes it
    (the group query over empty rows): the fast path yields the same."""
    empty = pa.table({f.name: pa.nulls(0, f.type) for f in schema})
    con = duckdb.connect()
    con.register(shape.stream.name, empty)
    zero = pd.to_datetime([0], unit="ms")
    bounds = pd.DataFrame({"__gs": zero, "__ge": zero})
    con.register(GROUP_RELATION, bounds)

    def columns_of(name: str):
        return [f.name for f in schema]

    text = to_engine_sql(plan.group_query, "duckdb", columns_of, mode="group")
    try:
        relation = con.sql(text)
    except duckdb.Error as exc:
        raise SqlError(f"query {plan.name}: {str(exc).splitlines()[0]}") from None
    arrow = relation.arrow().schema
    return list(relation.columns), [str(t) for t in relation.types], list(arrow.types)


def _aggregate_types(shape: Shape, schema: pa.Schema, replacement) -> dict[str, str]:
    """DuckDB's type of each aggregate of the query (as the general path computes it)."""
    empty = pa.table({f.name: pa.nulls(0, f.type) for f in schema})
    con = duckdb.connect()
    con.register(shape.stream.name, empty)
    texts = list(replacement)
    if not texts:
        return {}
    nodes = {}
    for part in (*shape.items, shape.having):
        if part is None:
            continue
        for agg in part.find_all(exp.AggFunc):
            nodes.setdefault(_bare(agg).sql(), _bare(agg))
    items = ", ".join(nodes[t].sql(dialect="duckdb") for t in texts)
    relation = con.sql(f'SELECT {items} FROM "{shape.stream.name}"')
    return {t: str(ty) for t, ty in zip(texts, relation.types, strict=True)}


def _projection_sql(shape, calls, replacement, agg_types, names, duck_types) -> str:
    """One query over the panes of a step: every fired group's result row."""
    by_name = {c.name: c for c in calls}
    inner = ["__gk", "__gs", "__ge"]
    inner += [exp.column(c, quoted=True).sql(dialect="duckdb") for c in shape.group]
    inner += [exp.column(w, quoted=True).sql(dialect="duckdb") for w in shape.windows]
    values: dict[str, str] = {}
    for i, (text, parts) in enumerate(replacement.items()):
        if len(parts) == 2:  # AVG: sum / non-null count
            total, count = parts
            value = f"CASE WHEN {count} > 0 THEN CAST({total} AS DOUBLE) / {count} END"
        else:
            value = parts[0]
        values[text] = f"__v{i}"
        inner.append(f"CAST({value} AS {agg_types[text]}) AS __v{i}")
    if shape.where is not None:
        count = next(c.name for c in calls if c.kind == "count" and c.arg == KEEP)
        inner.append(f"{count} AS {ROWS}")
    del by_name

    def rewrite(node: exp.Expression) -> str:
        node = _bare(node)
        for agg in list(node.find_all(exp.AggFunc)):
            key = agg.sql()
            if key in values:
                column = exp.column(values[key])
                if agg is node:
                    return column.sql(dialect="duckdb")
                agg.replace(column)
        return node.sql(dialect="duckdb")

    items = []
    for item, name, ty in zip(shape.items, names, duck_types, strict=True):
        body = item.this if isinstance(item, exp.Alias) else item
        quoted = exp.to_identifier(name, quoted=True).sql(dialect="duckdb")
        items.append(f"CAST({rewrite(body)} AS {ty}) AS {quoted}")
    conditions = []
    if shape.where is not None:
        conditions.append(f"{ROWS} > 0")
    if shape.having is not None:
        conditions.append(f"({rewrite(shape.having)})")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return (
        f"SELECT __gk, __gs, __ge, {', '.join(items)} "
        f"FROM (SELECT {', '.join(inner)} FROM {PANES}) AS __p{where}"
    )


# ------------------------------------------------------------------ local runs


def local_rows(sql: AggregatePlan) -> pd.DataFrame:
    """The stream's rows pre-projected (DuckDB over all of them at once), with
    their processing time and event time (epoch ms, NaN for NULL)."""
    table = sql.shape.stream
    frame = table.frame
    arrays = []
    for f in sql.schema:
        values = frame[f.name]
        if pa.types.is_timestamp(f.type):
            array = pa.array(pd.to_datetime(values), f.type, from_pandas=True)
        else:
            array = pa.Array.from_pandas(values)
            if array.type != f.type:
                array = array.cast(f.type)
        arrays.append(array)
    rows = pa.Table.from_arrays(arrays, schema=sql.schema)
    con = duckdb.connect()
    con.register(table.name, rows)
    items = sql.projection.select("duckdb") or ["1 AS __one"]
    out = con.sql(f'SELECT {", ".join(items)} FROM "{table.name}"').df()
    out[ET] = event_millis(frame[table.event_time])
    out[PTIME] = frame[PTIME].to_numpy(np.int64)
    if not sql.shape.group:
        out[KEY] = np.zeros(len(out), dtype=np.int64)
    return out


def run_local(sql: AggregatePlan, steps_of, as_of: int | None = None):
    """Replay the stream through the fast path, step by step, as
    :func:`headwater.sql.local.run_stream` does (``steps_of``: its steps). Returns
    the result columns, the changelog (with group columns) and the dead letters."""
    plan = sql.query
    rows = local_rows(sql)
    ptimes, marks = steps_of(plan, rows, as_of)
    reducer = Reducer(sql.strategy, sql.aggregations)
    maintainer = sql.maintainer
    state = maintainer.restore(None)
    null = np.isnan(rows[ET].to_numpy(np.float64))
    arrived = rows[PTIME].to_numpy(np.int64) <= (as_of if as_of is not None else np.inf)
    reason = DropReason.NULL_EVENT_TIME.value
    letters = [dead_letters(sql, _as_dropped(rows[null & arrived], reason))]
    valid = rows[~null].sort_values(PTIME, kind="stable")
    arrival = valid[PTIME].to_numpy(np.int64)
    begin = np.searchsorted(arrival, ptimes, side="left")
    end = np.searchsorted(arrival, ptimes, side="right")
    values = sql.inputs
    changes = []
    previous = MIN_TIMESTAMP
    for i, ptime in enumerate(ptimes):
        part = valid.iloc[begin[i] : end[i]]
        bundle = None
        if len(part):
            ts = part[ET].to_numpy(np.float64).astype(np.int64)
            inputs = part[values].reset_index(drop=True) if values else None
            bundle = Bundle(part[KEY].to_numpy(), ts, inputs)
        wm = int(marks[i]) if marks[i] > previous else None
        previous = max(previous, int(marks[i]))
        emission = apply_step(reducer, MicroBatch(bundle, watermark=wm, now=int(ptime)))
        if len(emission.dropped):
            letters.append(dead_letters(sql, emission.dropped))
        if len(emission.panes):
            changes.append(maintainer.apply(emission.panes, int(ptime), state))
            maintainer.expire(state, reducer.watermark)
    full = [c for c in changes if len(c)]
    changelog = (
        pd.concat(full, ignore_index=True)
        if full
        else maintainer.apply(pd.DataFrame(), 0, maintainer.restore(None))
    )
    full_letters = [x for x in letters if len(x)]
    dead = pd.concat(full_letters, ignore_index=True) if full_letters else letters[0]
    return maintainer.columns, changelog, dead


def _as_dropped(rows: pd.DataFrame, reason: str) -> pd.DataFrame:
    """Pre-projected rows as the model's dropped frame (no window)."""
    n = len(rows)
    return pd.DataFrame(
        {
            "key": rows[KEY].to_numpy() if n else np.zeros(0, dtype=object),
            "timestamp": rows[ET].to_numpy(np.float64) if n else np.zeros(0),
            "window_start": np.full(n, np.nan),
            "window_end": np.full(n, np.nan),
            "reason": np.full(n, reason, dtype=object),
        }
    )


def dead_letters(sql: AggregatePlan, dropped: pd.DataFrame) -> pd.DataFrame:
    """Dead letters of the fast path from the model's dropped frame (columns
    ``key``, ``timestamp``, ``window_start``, ``window_end``, ``reason``; a
    lifted drop on Spark also ``elements``): query, table, reason, window, the
    GROUP BY columns and the event time."""
    table = sql.shape.stream
    n = len(dropped)
    if "elements" in dropped.columns and n:
        times = dropped["elements"].fillna(1).to_numpy(np.int64)
        dropped = dropped.loc[dropped.index.repeat(times)].reset_index(drop=True)
        n = len(dropped)
    out = pd.DataFrame(
        {
            "query": np.full(n, sql.query.name, dtype=object),
            "table": np.full(n, table.name, dtype=object),
            "reason": dropped["reason"].to_numpy(object) if n else np.zeros(0, dtype=object),
        }
    )
    for column in ("window_start", "window_end"):
        ms = pd.to_numeric(dropped[column], errors="coerce").to_numpy(np.float64)
        out[column] = pd.to_datetime(ms, unit="ms")
    if sql.shape.group and n:
        decoded = sql.maintainer._decode(dropped["key"].to_numpy())
        for name, array in decoded.items():
            out[name] = array.to_pandas()
    elif sql.shape.group:
        for name in sql.shape.group:
            out[name] = pd.Series([], dtype=object)
    et = table.event_time
    if et not in out.columns:
        ms = pd.to_numeric(dropped["timestamp"], errors="coerce").to_numpy(np.float64)
        is_time = pa.types.is_timestamp(sql.schema.field(et).type)
        out[et] = pd.to_datetime(ms, unit="ms") if is_time else ms
    return out


__all__ = [
    "AggregateMaintainer",
    "AggregatePlan",
    "compile_aggregate",
    "enabled",
    "general_path",
    "run_local",
    "why_not",
]


def with_keys(plan: QueryPlan, keys: tuple[str, ...]) -> QueryPlan:
    """``plan`` whose general-path groups are (``keys``, window): the fast path's
    groups, for comparing the two paths on a query with GROUP BY columns."""
    return replace(plan, keys=tuple(keys))
