"""Running a query in this process: DuckDB for the relational part, the model
for event-time groups, triggers and lateness.

A bounded query is one DuckDB query over the tables (windowing TVFs expanded).
A streaming query compiles to a :class:`SqlPlan`: a windowed plan of the model
over the union of its streams (every column collected per event-time group)
and a :class:`~headwater.sql.maintain.GroupMaintainer` that turns fired groups
into the changelog. Here its recorded streams are replayed step by step: all
lines of one processing time form a step (rows added and watermarks advanced,
then the timers due at that time fire).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.model.combiners import ToList
from headwater.model.panes import Accumulation
from headwater.model.reducer import Reducer
from headwater.model.schema import DropReason
from headwater.model.steps import Bundle, MicroBatch, apply_step
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MIN_TIMESTAMP
from headwater.sql.catalog import PTIME, event_millis, watermark_after_steps
from headwater.sql.changelog import GROUP_COLUMNS, table_view
from headwater.sql.errors import SqlError
from headwater.sql.maintain import EVENT_TIME, KEY, SOURCE, GroupMaintainer, StreamLayout
from headwater.sql.planner import QueryPlan
from headwater.sql.translate import to_engine_sql


@dataclass
class SqlRun:
    """A streaming query's changelog (with group columns) and dead letters."""

    columns: list[str]
    changelog: pd.DataFrame
    dead_letters: pd.DataFrame

    def changes(self) -> pd.DataFrame:
        """The changelog a user reads: the query's columns, then undo, ptime, ver."""
        out = self.changelog.drop(columns=list(GROUP_COLUMNS)).reset_index(drop=True)
        out["ptime"] = pd.to_datetime(out["ptime"].astype(np.int64), unit="ms")
        out["undo"] = out["undo"].astype(bool)
        out["ver"] = out["ver"].astype(np.int64)
        return out

    def table(self, as_of: int | None = None) -> pd.DataFrame:
        return table_view(self.changelog, self.columns, as_of)


def _columns_of(plan: QueryPlan):
    columns = {t.name.lower(): t.columns for t in (*plan.streams, *plan.tables)}
    return lambda name: columns[name.lower()]


def _engine_error(exc: Exception, query: exp.Expression) -> SqlError:
    """A DuckDB binder/parser error as a SqlError at the column it names."""
    from headwater.sql.errors import position

    text = str(exc).split("\n")[0]
    for column in query.find_all(exp.Column):
        if f'"{column.name}"' in text:
            line, col = position(column)
            return SqlError(text, line, col)
    return SqlError(text)


def run_bounded(plan: QueryPlan) -> pd.DataFrame:
    """The query over whole tables: the result after all input."""
    con = duckdb.connect()
    for table in (*plan.streams, *plan.tables):
        con.register(table.name, table.frame.drop(columns=[PTIME], errors="ignore"))
    text = to_engine_sql(plan.query, "duckdb", _columns_of(plan))
    try:
        return con.sql(text).df()
    except duckdb.Error as exc:
        raise _engine_error(exc, plan.query) from None


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class SqlPlan:
    """A streaming query as the model runs it: a windowing strategy over the
    union input (keys in ``__key``, event time in ``__et``), one ``ToList``
    aggregation per union column, and the maintainer of its result."""

    query: QueryPlan
    strategy: WindowingStrategy
    aggregations: dict[str, tuple[ToList, str]]
    layouts: tuple[StreamLayout, ...]
    maintainer: GroupMaintainer


def compile_sql(plan: QueryPlan) -> SqlPlan:
    layouts = []
    for i, table in enumerate(plan.streams):
        frame = table.frame
        columns = tuple(table.columns)
        times = frozenset(c for c in columns if pd.api.types.is_datetime64_any_dtype(frame[c]))
        layouts.append(
            StreamLayout(
                name=table.name,
                columns=columns,
                union=tuple(f"__t{i}_{j}" for j in range(len(columns))),
                types=tuple(arrow_type(frame[c]) for c in columns),
                timestamps=times,
            )
        )
    text = to_engine_sql(plan.group_query, "duckdb", _columns_of(plan), mode="group")
    tables = {t.name: t.frame.drop(columns=[PTIME], errors="ignore") for t in plan.tables}
    try:
        maintainer = GroupMaintainer(text, tuple(layouts), tables, plan.name)
    except SqlError as exc:
        raise _engine_error(exc, plan.query) from None
    union = [SOURCE, *(u for layout in layouts for u in layout.union)]
    strategy = WindowingStrategy(
        window_fn=plan.window_fn,
        trigger=plan.emit.trigger(),
        accumulation=Accumulation.ACCUMULATING,
        allowed_lateness=plan.emit.retention(plan.allowed_lateness),
    )
    return SqlPlan(plan, strategy, {u: (ToList(), u) for u in union}, tuple(layouts), maintainer)


def arrow_type(column: pd.Series) -> pa.DataType:
    """The Arrow type a stream column has in a group's rows (timestamps in ms)."""
    if pd.api.types.is_datetime64_any_dtype(column):
        return pa.timestamp("ms")
    return pa.Array.from_pandas(column.iloc[:1000]).type


def union_rows(sql: SqlPlan) -> pd.DataFrame:
    """Every stream row once in the union layout, with its ptime."""
    parts = []
    for i, (table, layout) in enumerate(zip(sql.query.streams, sql.layouts, strict=True)):
        frame = table.frame
        part = {SOURCE: np.full(len(frame), i, dtype=np.int64)}
        for column, union in zip(layout.columns, layout.union, strict=True):
            values = frame[column]
            part[union] = event_millis(values) if column in layout.timestamps else values.to_numpy()
        part[EVENT_TIME] = event_millis(frame[table.event_time])
        part[KEY] = _keys(frame, sql.query.keys)
        part[PTIME] = frame[PTIME].to_numpy(np.int64)
        parts.append(pd.DataFrame(part))
    rows = pd.concat(parts, ignore_index=True)
    return rows


def _keys(frame: pd.DataFrame, keys: tuple[str, ...]) -> np.ndarray:
    if not keys:
        return np.zeros(len(frame), dtype=np.int64)
    return frame[list(keys)].astype(str).agg("|".join, axis=1).to_numpy(object)


# ------------------------------------------------------------------ replay


def run_stream(plan: QueryPlan, as_of: int | None = None) -> SqlRun:
    """Replay the query's streams up to processing time ``as_of`` (all when None)."""
    for table in plan.streams:
        if not table.is_replay:
            raise SqlError(f"table {table.name!r} is a Spark stream: run it with runner='spark'")
    sql = compile_sql(plan)
    rows = union_rows(sql)
    ptimes, marks = steps_of(plan, rows, as_of)
    reducer = Reducer(sql.strategy, sql.aggregations)
    state = sql.maintainer.restore(None)
    null = np.isnan(rows[EVENT_TIME].to_numpy(np.float64))
    letters = [dead_letters(rows[null], DropReason.NULL_EVENT_TIME.value, sql)]
    valid = rows[~null].sort_values(PTIME, kind="stable")
    arrival = valid[PTIME].to_numpy(np.int64)
    begin = np.searchsorted(arrival, ptimes, side="left")
    end = np.searchsorted(arrival, ptimes, side="right")
    changes = []
    previous = MIN_TIMESTAMP
    values = [c for c in valid.columns if c in sql.aggregations]
    for i, ptime in enumerate(ptimes):
        part = valid.iloc[begin[i] : end[i]]
        bundle = None
        if len(part):
            ts = part[EVENT_TIME].to_numpy(np.float64).astype(np.int64)
            bundle = Bundle(part[KEY].to_numpy(), ts, part[values].reset_index(drop=True))
        wm = int(marks[i]) if marks[i] > previous else None
        previous = max(previous, int(marks[i]))
        emission = apply_step(reducer, MicroBatch(bundle, watermark=wm, now=int(ptime)))
        if len(emission.dropped):
            letters.append(dead_letters(emission.dropped, emission.dropped["reason"], sql))
        changes.append(sql.maintainer.apply(emission.panes, int(ptime), state))
    full = [c for c in changes if len(c)]
    changelog = (
        pd.concat(full, ignore_index=True)
        if full
        else sql.maintainer.apply(pd.DataFrame(), 0, state)
    )
    return SqlRun(sql.maintainer.columns, changelog, pd.concat(letters, ignore_index=True))


def steps_of(plan: QueryPlan, rows: pd.DataFrame, as_of: int | None):
    """The processing times of the steps (up to ``as_of``) and the query's
    watermark after each: the smallest of its streams' watermarks."""
    times = [rows[PTIME].to_numpy(np.int64)]
    times += [
        t.watermarks["ptime"].to_numpy(np.int64) for t in plan.streams if t.watermarks is not None
    ]
    ptimes = np.unique(np.concatenate(times))
    if as_of is not None:
        ptimes = ptimes[ptimes <= as_of]
    marks = np.min([watermark_after_steps(t, ptimes) for t in plan.streams], axis=0)
    return ptimes, marks


def dead_letters(rows: pd.DataFrame, reason, sql: SqlPlan) -> pd.DataFrame:
    """Dead letters of a query: the query, the table, why, the window, the row."""
    parts = []
    source = rows[SOURCE].to_numpy(np.int64) if len(rows) else np.zeros(0, np.int64)
    reasons = np.broadcast_to(np.asarray(reason, dtype=object), (len(rows),))
    for i, layout in enumerate(sql.layouts):
        mine = rows[source == i]
        if not len(mine):
            continue
        frame = pd.DataFrame(
            {"query": sql.query.name, "table": layout.name, "reason": reasons[source == i]}
        )
        for column in ("window_start", "window_end"):
            values = mine[column].to_numpy() if column in mine.columns else None
            frame[column] = pd.to_datetime(values, unit="ms") if values is not None else pd.NaT
        for column, union in zip(layout.columns, layout.union, strict=True):
            values = mine[union].to_numpy()
            if column in layout.timestamps:
                values = pd.to_datetime(pd.Series(values, dtype="float64"), unit="ms").to_numpy()
            frame[column] = values
        parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=["query", "table", "reason", "window_start", "window_end"])
    return pd.concat(parts, ignore_index=True)
