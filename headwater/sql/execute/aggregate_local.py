"""The fast path of a plain windowed aggregate: real combiners, one vectorized
projection per step.

The general path (:mod:`headwater.sql.execute.local`, :mod:`headwater.sql.maintain.groups`)
keeps every row of an event-time group and recomputes a fired group's result
with one DuckDB call per group: exact for joins and Top-N, slow for a big
windowed aggregate. A query of the shape

    SELECT <group columns, aggregates, scalar expressions of them>
    FROM Tumble(data => TABLE(s), ...) | Hop(...) | Session(...) | s
    [WHERE <row condition>]
    GROUP BY <window bounds>, <columns of s>
    [HAVING <condition over group columns and aggregates>]

over one stream ``s`` (no join, subquery, DISTINCT or window function; a raw
stream grouped by its event-time column; :mod:`headwater.sql.plan.fast_path`
decides) runs here instead:

1. **pre-projection**, row-wise, before the model: the GROUP BY columns as the
   model's key (one column: itself; several: a JSON object), the event time,
   ``WHERE`` as a flag and every aggregate's argument (``NULL`` where the row
   fails ``WHERE``: the row still reaches its group, so that triggers, lateness
   and dead letters see exactly the rows the general path sees). DuckDB over
   the rows locally, Spark SQL expressions on a streaming DataFrame on Spark
   (:mod:`headwater.sql.execute.aggregate_spark`).
2. **the model**: one windowed plan keyed by the GROUP BY columns with real
   combiners (``Sum``, ``Count``, ``Min``, ``Max``, ``CountDistinct``; ``AVG`` is
   a sum and a non-null count), so a group's state is its accumulators.
3. **a pane transform** (:mod:`headwater.sql.maintain.aggregate`) that turns
   ALL panes fired in a step into result rows with ONE DuckDB query and diffs
   them with what each group materialized last into the changelog
   (:mod:`headwater.sql.maintain.aggregate_state`).

The event-time group of the fast path is (GROUP BY columns, window): ``ver``
counts the changelog rows of such a group, and ``EMIT AFTER DELAY`` delays
each one on its own. For a query grouped by the window alone this is the
general path's group; with more GROUP BY columns the general path groups by
the window (use ``hw.sql(..., fast_path=False)`` and :func:`with_keys` to compare them).
A session runs here when its keys are the GROUP BY columns (none: grouped by
the window alone), so that the model's sessions per key are the query's; the
model runs them retracting, and the transform withdraws the row of a session
merged into another one.

The transform's state is each group's last result row and next ``ver``; a
runner calls its ``expire`` with the reducer's settled horizon
(``Reducer.settled``: windows collected and inside no live window), so the
state stays the size of the live windows, and a session merged into a live one
keeps its row until the merge's retraction withdraws it.

Dead letters have the general path's columns and values: the model carries
each row's position in its table (:data:`ROW`; on a live Spark stream, the
row's columns) to its dead letter (:func:`dead_letters`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.model.combiners import CombineFn
from headwater.model.reducer import Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError
from headwater.sql.execute.local_steps import (
    NULL_EVENT_TIME,
    DeadLetterForms,
    StepInput,
    replay,
)
from headwater.sql.maintain.aggregate import AggregateMaintainer, Call
from headwater.sql.plan.catalog import PTIME, Table, event_millis
from headwater.sql.plan.fast_path import AGGREGATES, Shape, analyze_shape, bare
from headwater.sql.plan.planner import QueryPlan
from headwater.sql.plan.stamps import micros_array, stamp_micros
from headwater.sql.plan.translate import engine_expression

#: Columns of the pre-projected rows (the model's input).
KEY, ET, KEEP = "__gkey", "__et", "__keep"
#: A replayed row's position in its table's frame: the model carries it to the
#: dead letters, which take the row's own values from the frame.
ROW = "__row"


def carried(sql: AggregatePlan) -> dict[str, str]:
    """The columns a live Spark stream's rows carry to the dead letters
    (``__r<i>``, timestamps as epoch µs) -> the stream's column."""
    return {f"__r{i}": f.name for i, f in enumerate(sql.schema)}


def stream_schema(table: Table) -> pa.Schema:
    """The Arrow types a stream's rows have in the queries of both paths (the
    general path's: timestamps in µs, see :mod:`headwater.sql.plan.stamps`)."""
    return pa.schema([pa.field(c, t) for c, t in table.arrow_types().items()])


def _key_kind(t: pa.DataType) -> str | None:
    """How a GROUP BY column travels in the key: its own value, epoch µs, or None
    (a type the fast path does not key by)."""
    if pa.types.is_timestamp(t):
        return "micros"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t):
        return "value"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "value"
    return None


# ------------------------------------------------------------------ the plan


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
    :class:`~headwater.sql.execute.local.SqlPlan`): the pre-projection, the model's
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


def try_compile(plan: QueryPlan) -> AggregatePlan | str:
    """The fast-path plan of ``plan``, or why the general path runs it: not a
    plain windowed aggregate, or a query the general path reports on (the
    fast path's own SqlError, e.g. a GROUP BY column of a type it cannot key by)."""
    if plan.functions:
        return "it calls user functions (the general path evaluates them)"
    shape = analyze_shape(plan)
    if isinstance(shape, str):
        return shape
    try:
        return compile_aggregate(plan)
    except SqlError as exc:
        return exc.message


def takes_fast_path(plan: QueryPlan) -> bool:
    """Whether the streaming ``plan`` runs on the fast path."""
    return plan.fast_path and isinstance(try_compile(plan), AggregatePlan)


def describe_maintenance(plan: QueryPlan) -> str:
    """The query's key and how its state grows on the path that runs it."""
    return plan.maintenance(accumulated=takes_fast_path(plan))


def describe_path(plan: QueryPlan) -> str:
    """Which path runs the streaming ``plan`` and, for the general path, why the
    fast path does not (``explain()`` shows it)."""
    if not plan.fast_path:
        reason = "the fast path was switched off for this query (fast_path=False)"
    else:
        compiled = try_compile(plan)
        if isinstance(compiled, AggregatePlan):
            what = "windowed" if plan.group_mode else "keyed"
            return f"fast path (a {what} aggregate: combiners, one projection per step)"
        reason = compiled
    return (
        "general path (incremental maintenance per event-time group), not the fast "
        f"path because {reason}"
    )


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
    args, stamps, calls, replacement = _aggregate_calls(shape, schema)
    rows = calls[("count", KEEP)].name if shape.where is not None else None
    projection = _pre_projection(shape, types, args, stamps)
    aggregations = {c.name: (c.combiner(), c.arg) for c in calls.values()}
    strategy = plan.windowing()
    maintainer = AggregateMaintainer.build(
        plan,
        shape,
        schema,
        list(calls.values()),
        replacement,
        rows,
    )
    return AggregatePlan(plan, shape, schema, strategy, aggregations, projection, maintainer)


def _aggregate_calls(shape: Shape, schema: pa.Schema):
    """The model aggregations of the query's aggregates: the pre-projected
    argument columns (name -> expression), those of a timestamp type, the calls
    by (kind, column), and each aggregate's SQL -> the names of its calls."""
    where = shape.where
    args: dict[str, exp.Expression] = {}  # arg column -> expression
    stamps: set[str] = set()  # arg columns of a timestamp type (carried as epoch µs)
    arg_of: dict[str, str] = {}  # expression SQL -> arg column
    calls: dict[tuple, Call] = {}
    replacement: dict[str, tuple[str, ...]] = {}  # aggregate SQL -> its calls
    empty = pa.table({f.name: pa.nulls(0, f.type) for f in schema})
    con = connection()
    con.register(shape.stream.name, empty)

    def arg(node: exp.Expression) -> str:
        node = bare(node)
        text = node.sql()
        if text not in arg_of:
            name = arg_of[text] = f"__x{len(arg_of)}"
            args[name] = node
            typed = con.sql(f'SELECT {node.sql(dialect="duckdb")} FROM "{shape.stream.name}"')
            if pa.types.is_timestamp(typed.arrow().schema.types[0]):
                stamps.add(name)
        return arg_of[text]

    def call(kind: str, column: str | None, timestamp: bool = False) -> str:
        spec = (kind, column)
        if spec not in calls:
            calls[spec] = Call(f"__a{len(calls)}", kind, column, timestamp)
        return calls[spec].name

    aggregates: list[exp.AggFunc] = []
    for part in (*shape.items, shape.having):
        if part is not None:
            aggregates += [a for a in part.find_all(exp.AggFunc) if isinstance(a, AGGREGATES)]
    for agg in aggregates:
        text = bare(agg).sql()
        if text in replacement:
            continue
        inner = agg.this
        if isinstance(agg, exp.Count) and isinstance(inner, exp.Star):
            kind = "count" if where is not None else "count_star"
            replacement[text] = (call(kind, KEEP if where is not None else None),)
            continue
        if isinstance(inner, exp.Distinct):
            column = arg(inner.expressions[0])
            replacement[text] = (call("count_distinct", column, column in stamps),)
            continue
        column = arg(inner)
        if isinstance(agg, exp.Avg):
            replacement[text] = (call("sum", column), call("count", column))
        else:
            kind = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}
            replacement[text] = (call(kind[type(agg)], column, column in stamps),)
    if where is not None:
        call("count", KEEP)
    return args, stamps, calls, replacement


def _pre_projection(shape: Shape, types, args, stamps: set[str]) -> Projection:
    """Each engine's expressions of the key, the WHERE flag and the aggregates'
    arguments (NULL where a row fails WHERE; timestamps as epoch µs)."""
    where = shape.where
    micros = {"duckdb": "epoch_us(CAST({} AS TIMESTAMP))", "spark": "unix_micros({})"}
    key: dict[str, str] = {}
    arg_sql: dict[str, dict[str, str]] = {}
    for engine in ("duckdb", "spark"):
        parts = []
        for column in shape.group:
            ref = exp.column(column, quoted=True).sql(dialect=engine)
            if _key_kind(types[column.lower()]) == "micros":
                ref = micros[engine].format(ref)
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
        out = {}
        for name, node in args.items():
            text = engine_expression(node, engine)
            if where is not None:
                text = f"CASE WHEN {engine_expression(where, engine)} THEN {text} END"
            out[name] = micros[engine].format(text) if name in stamps else text
        arg_sql[engine] = out
    keep = {
        e: f"CASE WHEN {engine_expression(where, e)} THEN 1 END" if where is not None else ""
        for e in key
    }
    return Projection(key=key, keep=keep, args=arg_sql)


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
            array = micros_array(stamp_micros(values), f.type)
        else:
            array = pa.Array.from_pandas(values)
            if array.type != f.type:
                array = array.cast(f.type)
        arrays.append(array)
    rows = pa.Table.from_arrays(arrays, schema=sql.schema)
    con = connection()
    con.register(table.name, rows)
    items = sql.projection.select("duckdb") or ["1 AS __one"]
    out = con.sql(f'SELECT {", ".join(items)} FROM "{table.name}"').df()
    out[ET] = event_millis(frame[table.event_time])
    out[PTIME] = frame[PTIME].to_numpy(np.int64)
    out[ROW] = np.arange(len(frame), dtype=np.int64)
    if not sql.shape.group:
        out[KEY] = np.zeros(len(out), dtype=np.int64)
    return out


def run_local(sql: AggregatePlan, steps_of, as_of: int | None = None):
    """Replay the stream through the fast path, step by step, as
    :func:`headwater.sql.execute.local.run_stream` does (``steps_of``: its steps). Returns
    the result columns, the changelog (with group columns) and the dead letters."""
    rows = local_rows(sql)
    forms = DeadLetterForms(
        null_event_time=lambda f: dead_letters(sql, _as_dropped(f, NULL_EVENT_TIME)),
        dropped=lambda d: dead_letters(sql, d),
    )
    changelog, dead = replay(
        StepInput(rows, ET, KEY, [*sql.inputs, ROW]),
        steps_of(sql.query, rows, as_of),
        Reducer(sql.strategy, sql.aggregations),
        sql.maintainer,
        forms,
        as_of,
    )
    return sql.maintainer.columns, changelog, dead


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
            ROW: rows[ROW].to_numpy(np.int64) if n else np.zeros(0, dtype=np.int64),
        }
    )


def dead_letters(sql: AggregatePlan, dropped: pd.DataFrame) -> pd.DataFrame:
    """Dead letters of the fast path from the model's dropped frame (columns
    ``key``, ``timestamp``, ``window_start``, ``window_end``, ``reason``; a
    lifted drop on Spark also ``elements``), with the general path's columns
    in its order (:func:`headwater.sql.execute.local.dead_letters`): query, table,
    reason, window, then every column of the stream, with the row's own values
    (the model carries each row's :data:`ROW`).

    A lifted drop (``lift=True`` on Spark) is a partial aggregate, not a row:
    only the GROUP BY columns and the event time have values there."""
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
    if ROW in dropped.columns:
        frame = table.frame.drop(columns=[PTIME], errors="ignore")
        rows = frame.iloc[dropped[ROW].to_numpy(np.int64)].reset_index(drop=True)
        return pd.concat([out, rows[[f.name for f in sql.schema]]], axis=1)
    kept = sql.maintainer.decode(dropped["key"].to_numpy()) if sql.shape.group and n else {}
    for f in sql.schema:
        if f.name in kept:
            out[f.name] = kept[f.name].to_pandas()
        elif f.name == table.event_time:
            ms = pd.to_numeric(dropped["timestamp"], errors="coerce").to_numpy(np.float64)
            out[f.name] = pd.to_datetime(ms, unit="ms") if pa.types.is_timestamp(f.type) else ms
        else:
            out[f.name] = pa.nulls(n, f.type).to_pandas()
    return out


def with_keys(plan: QueryPlan, keys: tuple[str, ...]) -> QueryPlan:
    """``plan`` whose general-path groups are (``keys``, window): the fast path's
    groups, for comparing the two paths on a query with GROUP BY columns."""
    return replace(plan, keys=tuple(keys))


__all__ = [
    "AggregatePlan",
    "compile_aggregate",
    "dead_letters",
    "describe_maintenance",
    "describe_path",
    "run_local",
    "takes_fast_path",
    "try_compile",
    "with_keys",
]
