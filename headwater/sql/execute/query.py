"""``hw.sql(query, tables=...)``: a query over tables and streams, and its result."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.io.sinks.stores import holding
from headwater.model.schema import RAW_RECORD_COLUMNS
from headwater.model.watermarks import WatermarkStrategy
from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError, position
from headwater.sql.execute.aggregate_local import describe_maintenance, describe_path
from headwater.sql.execute.correct import correct
from headwater.sql.execute.hybrid import quality_driven
from headwater.sql.execute.local import (
    SqlPlan,
    SqlRun,
    bounded_frames,
    compile_sql,
    each_row_why_not,
    run_bounded,
    run_stream,
    validate,
)
from headwater.sql.maintain.batch import BatchQuery
from headwater.sql.parse.ddl import state_ttl_ms
from headwater.sql.parse.dialect import Headwater, parse_query
from headwater.sql.plan.catalog import Catalog, Table, as_replay
from headwater.sql.plan.functions import Functions, function_set
from headwater.sql.plan.keys import KeyKind
from headwater.sql.plan.planner import QueryPlan, analyze
from headwater.sql.plan.proctime import with_processing_time
from headwater.sql.plan.quality import QualityQuery
from headwater.sql.plan.stateless import why_not as stateless_why_not
from headwater.sql.plan.top_rows import first_rows


def as_table(name: str, value: Any) -> Table:
    """A catalog table from what users pass: a :class:`Table` (a replay), a pandas
    DataFrame (bounded), a Spark DataFrame, or an ``hw.from_pandas`` /
    ``hw.from_spark`` source that names its event time and watermark (with an
    ``arrival_time``, ``hw.from_pandas`` is a stream)."""
    if isinstance(value, Table):
        return value
    if isinstance(value, pd.DataFrame):
        return Table(name=name, frame=_checked_frame(name, value))
    source = getattr(value, "event_time", None)
    if source is not None and hasattr(value, "df"):
        frame = _checked_frame(name, value.df) if isinstance(value.df, pd.DataFrame) else None
        spark = None if frame is not None else value.df
        wm = getattr(value, "resolved_watermark", lambda: None)()
        if frame is not None and getattr(value, "arrival_time", None) is not None:
            frame = as_replay(frame, value.arrival_time)  # a stream, replayed by arrival
        return Table(name=name, frame=frame, spark=spark, event_time=source, watermark=wm)
    if hasattr(value, "sparkSession") and hasattr(value, "columns"):
        return Table(name=name, spark=value)
    raise SqlError(
        f"table {name!r}: cannot read a {type(value).__name__}",
        hint="Pass a pandas or Spark DataFrame, hw.from_pandas(...)/hw.from_spark(...), "
        "or headwater.sql.read_replay(...)",
    )


def _checked_frame(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` if SQL can name each of its columns: at least one, each a distinct
    string (DuckDB and the planner fail deep inside otherwise)."""
    odd = [c for c in frame.columns if not isinstance(c, str)]
    if odd:
        raise SqlError(
            f"table {name!r}: column names must be strings, not {odd[0]!r}",
            hint="Name the columns, e.g. frame.columns = [str(c) for c in frame.columns]",
        )
    duplicated = sorted(set(frame.columns[frame.columns.duplicated()]))
    if duplicated:
        raise SqlError(
            f"table {name!r} has two columns named {duplicated[0]!r}",
            hint="Rename or drop one of them",
        )
    if not len(frame.columns):
        raise SqlError(f"table {name!r} has no columns", hint="Pass a frame with its columns")
    return frame


def _check_as_of(as_of: Any) -> None:
    """SqlError unless ``as_of`` is ``None`` or a processing time in epoch ms (a
    timestamp or text would reach numpy's comparisons and fail there)."""
    if as_of is None:
        return
    if isinstance(as_of, numbers.Real) and not isinstance(as_of, bool) and math.isfinite(as_of):
        return
    raise SqlError(
        f"as_of must be a processing time in epoch milliseconds, not {as_of!r}",
        hint="Convert a time, e.g. as_of=pd.Timestamp('2020-04-15 08:13').value // 1_000_000",
    )


class SqlQuery:
    """A query bound to its tables. A bounded query's result is its table; a
    streaming query's is a changelog (``EMIT STREAM``) or the table view as of
    a processing time."""

    def __init__(
        self,
        query: str | exp.Expression,
        tables: Mapping[str, Any],
        name: str = "query",
        functions: Functions = None,
        *,
        state_ttl: Any = None,
        fast_path: bool = True,
    ) -> None:
        catalog = Catalog({n: as_table(n, v) for n, v in tables.items()})
        tree = parse_query(query) if isinstance(query, str) else query
        tree, self.catalog = with_processing_time(tree, catalog)
        ttl = None if state_ttl is None else state_ttl_ms(state_ttl, "state_ttl")
        self.plan: QueryPlan = analyze(
            tree, self.catalog, name, function_set(functions), state_ttl=ttl, fast_path=fast_path
        )
        validate(self.plan)
        self._runs: dict[int | None, SqlRun] = {}

    def run(self, as_of: int | None = None) -> SqlRun:
        """The streaming run up to processing time ``as_of`` (epoch ms)."""
        if not self.plan.is_stream:
            raise SqlError(
                f"query {self.plan.name!r} reads no stream, so it has no run over processing time",
                hint="read its result with to_pandas() (or changelog(): each row added once)",
            )
        _check_as_of(as_of)
        if as_of not in self._runs:
            run = self._stream_run(as_of)
            if any(t.correction is not None for t in self.plan.streams):
                run = correct(self.plan, run, as_of)
            self._runs[as_of] = run
        return self._runs[as_of]

    def _stream_run(self, as_of: int | None) -> SqlRun:
        """The stream module's run (the runner's; corrections come on top)."""
        return run_stream(self.plan, as_of)

    def to_pandas(self, as_of: int | None = None) -> pd.DataFrame:
        """The result: a bounded query's table; a stream's changelog with EMIT
        STREAM, else its table view as of ``as_of``."""
        if not self.plan.is_stream:
            return self.changelog() if self.plan.emit.stream else run_bounded(self.plan)
        run = self.run(as_of)
        if self.plan.emit.stream:
            return run.changes()
        view = run.table(as_of)
        return _ordered(view, self.plan)

    def changelog(self, as_of: int | None = None) -> pd.DataFrame:
        """The changelog up to ``as_of`` (whatever the EMIT rendering): the
        query's columns, then ``undo``, ``ptime``, ``ver``. A bounded query's is
        its rows, each added once."""
        if self.plan.is_stream:
            return self.run(as_of).changes()
        rows = run_bounded(self.plan)
        # A bounded table is complete at once: each row is added once, at no
        # processing time of a stream.
        return rows.assign(undo=False, ptime=pd.NaT, ver=0)

    def write(self, sink, *, dead_letter_sink=None, **options: Any) -> None:
        """Send the changelog to ``sink`` (``sink(batch, batch_id)``, e.g. a
        :class:`~headwater.io.sinks.relation.RelationSink`): one batch per
        processing time of a replay, one batch for a bounded query; the dead
        letters to ``dead_letter_sink`` (one batch)."""
        batches = list(enumerate(changelog_batches(self.changelog(), sink)))
        run = getattr(sink, "write_run", None)  # a sink that applies a run as one
        with holding(sink):
            if callable(run):
                run([(batch, batch_id) for batch_id, batch in batches])
            else:
                for batch_id, batch in batches:
                    sink(batch, batch_id)
        if dead_letter_sink is not None:
            self.write_dead_letters(dead_letter_sink, options.get("as_of"))

    def write_dead_letters(self, sink, as_of: int | None = None) -> None:
        """The dead letters as one batch to ``sink`` (nothing when there are none)."""
        dead = self.dead_letters(as_of)
        if len(dead):
            sink(dead, 0)

    def dead_letters(self, as_of: int | None = None) -> pd.DataFrame:
        """Input the query dropped (late beyond the allowed lateness, null event
        time, a malformed line of a file), with the query's name, the table, the
        reason and the row's columns (a malformed line: its file, line number and
        text, :data:`~headwater.model.schema.RAW_RECORD_COLUMNS`)."""
        if self.plan.is_stream:
            return with_rejects(self.run(as_of).dead_letters, self.plan)
        return with_rejects(self._bounded_dead_letters(), self.plan)

    def _bounded_dead_letters(self) -> pd.DataFrame:
        """A bounded query's dead letters: its rows of NULL event time."""
        return bounded_frames(self.plan)[1]

    def watermark(self, table: str) -> WatermarkStrategy | None:
        """The watermark strategy the stream ``table`` runs with in this query: a
        quality-driven one with the estimates it takes from the stream's rows."""
        for t in self.plan.streams:
            if t.name.lower() == table.lower():
                return quality_driven(t) if isinstance(t.watermark, QualityQuery) else t.watermark
        streams = ", ".join(repr(t.name) for t in self.plan.streams) or "none"
        raise SqlError(f"the query reads no stream {table!r} (its streams: {streams})")

    def stage_notes(self) -> list[str]:
        """What this runner does otherwise with the query's stages (none here: the
        local runner maintains each by its own key)."""
        return []

    def explain(self) -> str:
        """How the query runs: its tables, event-time groups, EMIT trigger and
        path (the windowed-aggregate fast path, or the general path and why)."""
        plan = self.plan
        lines = [f"query {plan.name}: {plan.query.sql(dialect=Headwater)}"]
        for t in plan.streams:
            wm = t.watermark.describe() if t.watermark else "none"
            lines.append(f"  stream {t.name}: event time {t.event_time}, watermark {wm}")
        for t in plan.tables:
            lines.append(f"  table {t.name}: bounded")
        if plan.is_stream:
            path = describe_path(plan)
            general = None if path.startswith("fast") else compile_sql(plan, fast=False)
            lines.append(f"  event-time groups: {plan.window_fn!r}, keys {list(plan.keys)}")
            lines.append(f"  maintenance: {describe_maintenance(plan)}{_kept_text(plan, general)}")
            lines += [f"  {note}" for note in self.stage_notes()]
            lines.append(f"  {plan.emit.describe()}: trigger {plan.emit.trigger()!r}")
            lines.append(f"  allowed lateness: {plan.allowed_lateness} ms")
            lines.append(f"  runs on: {path}")
            if general is not None:
                lines.append(f"  general path evaluation: {_describe_batch(plan, general)}")
                lines.append(f"  general path keeps: {_columns_kept(general)}")
            lines.append(f"  on Spark streams: {_describe_spark_path(plan)}")
        return "\n".join(lines)


def changelog_batches(log: pd.DataFrame, sink: Any) -> list[Any]:
    """The changelog's batches, one per processing time: for a sink that takes
    Arrow, slices of one Arrow table of the whole changelog, so that every batch
    has the same column types (a column NULL in all of one batch's rows would be
    typed NULL there, and its rows would not match the same rows of another)."""
    if not len(log):
        return []
    log = log.sort_values("ptime", kind="stable").reset_index(drop=True)
    step = log.groupby("ptime", sort=True, dropna=False).ngroup().to_numpy()  # NaT: bounded
    bounds = [*np.flatnonzero(np.r_[True, step[1:] != step[:-1]]).tolist(), len(log)]
    if getattr(sink, "takes_arrow", False):
        table = pa.Table.from_pandas(log, preserve_index=False)
        return [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    return [log.iloc[a:b].reset_index(drop=True) for a, b in itertools.pairwise(bounds)]


def _kept_text(plan: QueryPlan, compiled: Any) -> str:
    """What a deduplication's or Top-N's keys keep on the general path (``compiled``,
    None on the fast path): their first rows (:mod:`headwater.sql.plan.top_rows`),
    or nothing."""
    first = first_rows(plan)
    if not isinstance(compiled, SqlPlan) or compiled.keep is None or first is None:
        return ""
    by = ", ".join(f"{c} {'DESC' if desc else 'ASC'}" for c, desc in first.order)
    return (
        f" that can still be among its first {first.n} by {by} (with those tied with the last"
        " of them or NULL there); the others are dropped, which changes no result"
    )


def _columns_kept(compiled: SqlPlan) -> str:
    """Which columns of each stream the general path's groups keep
    (:mod:`headwater.sql.plan.columns`): the others reach the dead letters only."""
    parts = []
    for every, kept in zip(compiled.layouts, compiled.maintainer.streams, strict=True):
        if kept.columns == every.columns:
            parts.append(f"every column of {every.name}")
        else:
            parts.append(
                f"{every.name}'s {', '.join(kept.columns)} (the columns the query reads;"
                f" its dead letters have all {len(every.columns)})"
            )
    return "; ".join(parts)


def _describe_batch(plan: QueryPlan, compiled: Any) -> str:
    """Whether the general path (``compiled``) evaluates a step's fired groups by one
    query, and why not (:mod:`headwater.sql.maintain.batch`); for a query whose
    operators take each row on its own, whether it runs stateless, and why not."""
    batch = compiled.maintainer.batch if isinstance(compiled, SqlPlan) else None
    stateless = each_row_why_not(compiled) if isinstance(compiled, SqlPlan) else "no"
    if stateless is None:
        text = (
            "stateless, one DuckDB query over every row on time (no operator combines "
            "rows: each row's changes are its own), not a query per step"
        )
        if plan.emit.after_watermark:
            text += (
                "; each row's changes at the first step whose watermark passes its"
                " event time (one search over the steps' watermarks, no timers)"
            )
        return text
    if isinstance(batch, BatchQuery):
        text = "batched, one DuckDB query per step over all the groups that fire in it"
        append = compiled.maintainer.append
        if append is None:
            text += (
                "; append-only (selections, projections and inner joins, each stream read "
                "once): a step evaluates only its new rows' pairs and inserts them, no diff "
                "against the last result"
            )
        else:
            text += f", and each fired group's rows diffed against its last result because {append}"
    else:
        text = f"evaluated per group (one DuckDB query per fired group) because {batch}"
    if plan.key.kind is KeyKind.ROW and isinstance(compiled, SqlPlan):
        text += f"; the model's reducer and timers, not stateless, because {stateless}"
    return text


def _describe_spark_path(plan: QueryPlan) -> str:
    """Whether the query runs over Spark streams without state, and why not."""
    reason = stateless_why_not(plan)
    if reason is None:
        return "stateless: Spark's own projection per micro-batch (no transformWithState)"
    return f"the shard operator (transformWithStateInPandas, state store) because {reason}"


def with_rejects(letters: pd.DataFrame, plan: QueryPlan) -> pd.DataFrame:
    """``letters`` and the malformed lines of the query's tables after them
    (their row columns null)."""
    parts = [
        t.rejects.assign(query=plan.name, table=t.name)
        for t in (*plan.streams, *plan.tables)
        if t.rejects is not None and len(t.rejects)
    ]
    if not parts:
        return letters
    columns = [*letters.columns, *(c for c in RAW_RECORD_COLUMNS if c not in letters.columns)]
    found = pd.concat(parts, ignore_index=True)
    if not len(letters):
        return found.reindex(columns=columns)
    return pd.concat([letters, found], ignore_index=True).reindex(columns=columns)


def _ordered(view: pd.DataFrame, plan: QueryPlan) -> pd.DataFrame:
    """ORDER BY / LIMIT of the query, on a table view."""
    if plan.order is None:
        return view
    import duckdb

    clauses = plan.order.copy()
    for column in clauses.find_all(exp.Column):
        column.set("table", None)
    select = exp.select("*").from_("__view")
    select.set("order", clauses.args.get("order"))
    select.set("limit", clauses.args.get("limit"))
    con = connection()
    con.register("__view", view)
    try:
        return con.sql(select.sql(dialect="duckdb")).df()
    except duckdb.Error:
        bad = [c for c in plan.order.find_all(exp.Column) if c.name not in view.columns]
        line, col = position(bad[0] if bad else plan.order)
        raise SqlError(
            "ORDER BY of a streaming query orders its table view: it can use the "
            "query's output columns only",
            line,
            col,
            f"Output columns: {', '.join(view.columns)}",
        ) from None
