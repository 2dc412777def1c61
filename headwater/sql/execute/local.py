"""Running a query in this process: DuckDB for the relational part, the model
for event-time groups, triggers and lateness.

A bounded query is one DuckDB query over the tables (windowing TVFs expanded).
A streaming query compiles to a :class:`SqlPlan`: a windowed plan of the model
over the union of its streams (every column collected per event-time group)
and a :class:`~headwater.sql.maintain.groups.GroupMaintainer` that turns fired groups
into the changelog. Here its recorded streams are replayed step by step: all
lines of one processing time form a step (rows added and watermarks advanced,
then the timers due at that time fire).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.model.arrays import distinct_sorted, union_sorted
from headwater.model.arrow_values import exact_numpy
from headwater.model.combiners import RowValues
from headwater.model.keep import TopRows
from headwater.model.reducer import Reducer
from headwater.model.schema import DropReason
from headwater.model.strategy import WindowingStrategy
from headwater.model.watermarks import END_OF_INPUT
from headwater.model.windows import CumulativeWindows, FixedWindows, GlobalWindows, SlidingWindows
from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError, position
from headwater.sql.execute.aggregate_local import AggregatePlan, try_compile
from headwater.sql.execute.local_steps import (
    NULL_EVENT_TIME,
    DeadLetterForms,
    StepInput,
    expiry_times,
    replay,
    replay_each_row,
)
from headwater.sql.execute.watermarks import watermark_after_steps
from headwater.sql.maintain.batch import BatchQuery
from headwater.sql.maintain.changelog import GROUP_COLUMNS, table_view
from headwater.sql.maintain.groups import (
    EVENT_TIME,
    KEY,
    ONE_GROUP,
    SOURCE,
    GroupMaintainer,
    StreamLayout,
    sql_typed,
)
from headwater.sql.maintain.stages import SecondStage
from headwater.sql.parse.dialect import WindowTVF
from headwater.sql.plan.calls import argument_error
from headwater.sql.plan.catalog import PTIME, event_millis
from headwater.sql.plan.columns import stream_columns_read
from headwater.sql.plan.epochs import mark_interval_epochs
from headwater.sql.plan.functions import function_error, register_duckdb
from headwater.sql.plan.keys import KeyKind
from headwater.sql.plan.names import check_names, known_columns
from headwater.sql.plan.planner import QueryPlan
from headwater.sql.plan.stamps import micros_as_stamps, stamp_micros
from headwater.sql.plan.stateless import why_not as stateless_why_not
from headwater.sql.plan.top_rows import first_rows
from headwater.sql.plan.translate import to_engine_sql


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


def columns_of(plan: QueryPlan, read: dict[str, frozenset[str]] | None = None):
    """A table's columns by name; with ``read``, a stream's only those in it."""
    columns = {t.name.lower(): t.columns for t in (*plan.streams, *plan.tables)}
    for name, names in (read or {}).items():
        columns[name.lower()] = [c for c in columns[name.lower()] if c in names]
    return lambda name: columns[name.lower()]


#: DuckDB's conversion error names the column whose value it could not cast.
_CAST_FROM = re.compile(r"\s*when casting from source column (?P<name>\S+)")

#: DuckDB's unknown column, bare (``x``) or qualified (``t.x``: "... does not have a column").
_UNKNOWN_COLUMN = re.compile(
    r'Referenced column "(?P<name>[^"]+)" not found|does not have a column named "(?P<q>[^"]+)"'
)


#: DuckDB's unknown function (``Scalar Function with name foo does not exist!``) and
#: the name it suggests (``Did you mean "floor"?``, on the next line).
_UNKNOWN_FUNCTION = re.compile(r'Function with name "?(?P<name>[^"\s!]+)"? does not exist')
_SUGGESTION = re.compile(r'Did you mean "(?P<name>[^"]+)"')


def _unknown_function(message: str, plan: QueryPlan) -> SqlError | None:
    """DuckDB's unknown function as a SqlError at the first call of it, with
    DuckDB's suggestion in the hint (None: ``message`` is another error)."""
    found = _UNKNOWN_FUNCTION.search(message)
    if found is None:
        return None
    name = found["name"].lower()
    spellings = (
        (f, f.name if isinstance(f, exp.Anonymous) else f.sql_name())
        for f in plan.query.find_all(exp.Func)
    )
    calls = [(position(f), spelled) for f, spelled in spellings if spelled.lower() == name]
    placed = sorted(c for c in calls if c[0][0] is not None)
    (line, col), spelled = placed[0] if placed else ((None, None), found["name"])
    suggestion = _SUGGESTION.search(message)
    hint = f"Did you mean {suggestion['name'].upper()}? " if suggestion else ""
    hint += "Queries call DuckDB's SQL functions (translated to Spark SQL on Spark)"
    return SqlError(f"unknown function {spelled!r}", line, col, hint)


def _in_grouped_select(column: exp.Column) -> bool:
    select = column.find_ancestor(exp.Select)
    return select is not None and select.args.get("group") is not None


_UNKNOWN_TABLE = re.compile(r'Referenced table "([^"]+)" not found')


def _out_of_scope(text: str, plan: QueryPlan) -> SqlError | None:
    """``A.id`` where no table or alias A is in scope (e.g. outside the subquery
    that names A), at the first such column (the outermost)."""
    unknown = _UNKNOWN_TABLE.search(text)
    if unknown is None:
        return None
    name = unknown.group(1).lower()
    for column in plan.query.find_all(exp.Column):  # breadth first: outer queries first
        if column.table.lower() == name:
            return SqlError(
                f"{column.sql()}: no table or alias {column.table} here",
                *position(column),
                "A subquery's tables are visible only inside it: select the column "
                "there and read it through the subquery's alias",
            )
    return None


def _engine_error(exc: Exception, plan: QueryPlan) -> SqlError:
    """A DuckDB binder error as a SqlError at the column or function it names; an
    unknown column's message lists the columns there are; a user function's failure
    is its FunctionError."""
    function = function_error(str(exc)) or _unknown_function(str(exc), plan)
    if function is not None:
        return function
    arguments = argument_error(str(exc), plan.query, _column_types(plan))
    if arguments is not None:
        return arguments
    text = str(exc).split("\n")[0]
    text = text.split(": ", 1)[1] if text.startswith("query ") else text
    out_of_scope = _out_of_scope(text, plan)
    if out_of_scope is not None:
        return out_of_scope
    unknown = _UNKNOWN_COLUMN.search(text)
    columns = list(plan.query.find_all(exp.Column))
    cast = _CAST_FROM.search(text)
    if cast:  # a value of the user's column that DuckDB cannot convert, e.g. to TIMESTAMP
        name = cast.group("name")
        placed = [c for c in columns if c.name == name and position(c)[0] is not None]
        line, col = position(placed[0]) if placed else (None, None)
        problem = text[: cast.start()].removeprefix("Conversion Error: ").rstrip()
        return SqlError(
            f"column {name!r}: {problem}",
            line,
            col,
            f"Fix the values of {name!r}, or convert them first (e.g. CAST, strptime)",
        )
    if "GROUP BY" in text:  # a grouped SELECT's column, not a namesake elsewhere
        columns.sort(key=lambda c: not _in_grouped_select(c))
    for column in columns:
        if f'"{column.name}"' in text:
            line, col = position(column)
            if unknown:
                hint = f"Columns: {known_columns(plan)}"
                return SqlError(f"unknown column {column.name!r}", line, col, hint)
            return SqlError(text, line, col)
    return SqlError(text)


def _empty_tables(plan: QueryPlan) -> duckdb.DuckDBPyConnection:
    """A connection with the query's tables, empty, of their real types."""
    con = connection(registers_functions=bool(plan.functions))
    register_duckdb(con, plan.functions)
    for table in (*plan.streams, *plan.tables):
        types = table.arrow_types()
        empty = pa.table({c: pa.array([], type=t) for c, t in types.items()})
        con.register(table.name, empty)
    return con


def _column_types(plan: QueryPlan) -> dict[str, str]:
    """DuckDB's type of each column (lower-case name) of the query's tables."""
    con = _empty_tables(plan)
    types: dict[str, str] = {}
    for table in (*plan.streams, *plan.tables):
        relation = con.table(table.name)
        pairs = zip(relation.columns, relation.types, strict=True)
        types.update({c.lower(): str(t) for c, t in pairs})
    return types


def result_types(plan: QueryPlan) -> list[tuple[str, str]]:
    """The query's result columns and their DuckDB types (as every runner's groups
    compute them), bound over empty tables."""
    con = _empty_tables(plan)
    relation = con.sql(to_engine_sql(plan.query, "duckdb", columns_of(plan)))
    return [(c, str(t)) for c, t in zip(relation.columns, relation.types, strict=True)]


def validate(plan: QueryPlan) -> None:
    """Bind the query against empty tables of the real types (DuckDB), so that an
    unknown column or a type error is the same SqlError on every runner, before
    anything runs."""
    check_names(plan)
    con = _empty_tables(plan)
    text = to_engine_sql(plan.query, "duckdb", columns_of(plan))
    try:
        relation = con.sql(text)
        relation.limit(0).fetchall()
    except duckdb.Error as exc:
        raise _engine_error(exc, plan) from None
    mark_interval_epochs(plan.query, lambda probe: _binds(con, probe, plan))
    if plan.is_stream:
        _check_flat_results(plan, relation.columns, relation.types)


def _binds(con: duckdb.DuckDBPyConnection, query: exp.Expression, plan: QueryPlan) -> bool:
    """Whether ``query`` (a variant of the plan's) binds over the empty tables."""
    try:
        con.sql(to_engine_sql(query, "duckdb", columns_of(plan))).limit(0).fetchall()
    except duckdb.Error:
        return False
    return True


#: DuckDB's nested types: values a changelog cannot net, number or order.
_NESTED = ("LIST", "STRUCT", "MAP", "ARRAY", "UNION")


def result_position(plan: QueryPlan, name: str) -> tuple[int | None, int | None]:
    """(line, col) of the select item of result column ``name`` (else the first item)."""
    select = plan.query if isinstance(plan.query, exp.Select) else None
    items = select.expressions if select is not None else []
    placed = [e for e in items if e.alias_or_name == name] or items[:1]
    return position(placed[0]) if placed else (None, None)


def check_spark_results(plan: QueryPlan) -> None:
    """SqlError at the select item of a result column a Spark stream cannot carry:
    an INTERVAL (DuckDB's months, days and microseconds have no Spark type; the
    bounded query's result is collected, so it keeps them)."""
    for name, kind in result_types(plan):
        if kind != "INTERVAL":
            continue
        raise SqlError(
            f"result column {name!r} is an INTERVAL: a Spark stream's results have no "
            "interval type",
            *result_position(plan, name),
            "Select a number: EXTRACT(EPOCH FROM ended - started) (seconds), "
            "DATE_DIFF('millisecond', started, ended) or TIMESTAMPDIFF(SECOND, started, ended)",
        )


def _check_flat_results(plan: QueryPlan, names: list[str], types: list) -> None:
    """SqlError at the select item of a streaming query's first result column of
    a nested type (a list, struct or map): the changelog nets, numbers and orders
    result rows by their values, and such a value is no key of pandas' (it used to
    fail inside pandas when the first row came)."""
    for name, kind in zip(names, types, strict=True):
        if getattr(kind, "id", "").upper() not in _NESTED:
            continue
        line, col = result_position(plan, name)
        raise SqlError(
            f"result column {name!r} is a {kind} value: a streaming result's columns "
            "are plain values (its changelog compares rows)",
            line,
            col,
            "Select its elements (ps[1], LEN(ps)) or text of it "
            "(CAST(ps AS VARCHAR), STRING_AGG(CAST(x AS VARCHAR), ',' ORDER BY x))",
        )


def event_times(plan: QueryPlan) -> dict[str, str]:
    """Each table's event-time column (by lower-case name): the one it declares,
    else the DESCRIPTOR of a windowing TVF over it. A bounded query leaves out
    the rows where it is NULL (dead letters), as a stream does."""
    out = {t.name.lower(): t.event_time for t in (*plan.streams, *plan.tables) if t.event_time}
    for tvf in plan.query.find_all(WindowTVF):
        if isinstance(tvf.this, exp.Table):
            out.setdefault(tvf.this.name.lower(), tvf.args["timecol"].name)
    return out


def bounded_frames(plan: QueryPlan) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The rows a bounded query reads, per table, and the dead letters of the rows
    it cannot use (NULL event time)."""
    times = event_times(plan)
    frames, letters = {}, []
    for table in (*plan.streams, *plan.tables):
        frame = table.local_frame()
        column = times.get(table.name.lower())
        if column is not None and column in frame.columns:
            null = frame[column].isna().to_numpy()
            letters.append((table.name, frame[null]))
            frame = frame[~null]
        frames[table.name] = frame
    return frames, row_letters(plan, letters, DropReason.NULL_EVENT_TIME.value)


def row_letters(plan: QueryPlan, parts, reason: str) -> pd.DataFrame:
    """Dead letters of whole rows (``parts``: (table name, its rows)) in the
    columns of :func:`dead_letters`: query, table, reason, window (none), then
    the columns of every table that has an event time, each row's values as given."""
    times = event_times(plan)
    columns = ["query", "table", "reason", "window_start", "window_end"]
    for table in (*plan.streams, *plan.tables):
        if table.name.lower() in times:
            columns += [c for c in table.columns if c not in columns]
    meta = {"query": plan.name, "reason": reason, "window_start": pd.NaT, "window_end": pd.NaT}
    frames = [rows.assign(table=name, **meta) for name, rows in parts if len(rows)]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True).reindex(columns=columns)


def run_bounded(plan: QueryPlan) -> pd.DataFrame:
    """The query over whole tables (less the rows of NULL event time): the result
    after all input."""
    con = connection(registers_functions=bool(plan.functions))
    register_duckdb(con, plan.functions)
    for name, frame in bounded_frames(plan)[0].items():
        con.register(name, frame)
    text = to_engine_sql(plan.query, "duckdb", columns_of(plan))
    try:
        return sql_typed(con.sql(text)).df()
    except duckdb.Error as exc:
        raise _engine_error(exc, plan) from None


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class SqlPlan:
    """A streaming query as the model runs it: a windowing strategy over the
    union input (keys in ``__key``, event time in ``__et``), one ``RowValues``
    aggregation per union column, and the maintainer of its result."""

    query: QueryPlan
    strategy: WindowingStrategy
    aggregations: dict[str, tuple[RowValues, str]]
    layouts: tuple[StreamLayout, ...]
    maintainer: GroupMaintainer
    #: which rows of a key the reducer keeps (None: all): a Top-N's first rows
    keep: TopRows | None = None

    @property
    def values(self) -> list[str]:
        """The union input's columns the reducer takes: every stream's, so that
        the rows it drops are dead letters with all their columns, though it
        keeps only those the query reads (:attr:`aggregations`)."""
        return [SOURCE, *(u for layout in self.layouts for u in layout.union)]

    @property
    def unread(self) -> tuple[str, ...]:
        """The union columns the query does not read: carried to the reducer for
        its dead letters only."""
        return tuple(c for c in self.values if c not in self.aggregations)


def compile_sql(plan: QueryPlan, fast: bool | None = None, batched: bool = True) -> SqlPlan:
    """The query's streaming plan. A plain windowed aggregate compiles to the fast
    path (:mod:`headwater.sql.execute.aggregate_local`: combiners, one projection per step)
    unless ``fast`` is False (default: the query's own ``fast_path``, set by
    ``hw.sql(..., fast_path=False)``). The general path evaluates a step's groups
    by one query unless ``batched`` is False."""
    if plan.fast_path if fast is None else fast:
        fast_plan = try_compile(plan)
        if isinstance(fast_plan, AggregatePlan):
            return fast_plan  # type: ignore[return-value]
    layouts = []
    for i, table in enumerate(plan.streams):
        types = table.arrow_types()
        columns = tuple(types)
        layouts.append(
            StreamLayout(
                name=table.name,
                columns=columns,
                union=tuple(f"__t{i}_{j}" for j in range(len(columns))),
                types=tuple(types.values()),
                timestamps=frozenset(c for c, t in types.items() if pa.types.is_timestamp(t)),
            )
        )
    read = stream_columns_read(plan)
    kept = [layout.reading(read[layout.name]) for layout in layouts]
    tables = {t.name: t.local_frame() for t in plan.tables}
    try:
        maintainer = GroupMaintainer(
            group_sql(plan, read),
            tuple(kept),
            tables,
            plan.name,
            batched,
            plan.functions,
            one_group=plan.key.kind is KeyKind.NONE,
            expiring=state_ttl(plan) is not None,
        )
    except SqlError as exc:
        raise _engine_error(exc, plan) from None
    union = [SOURCE, *(u for layout in kept for u in layout.union)]
    strategy = plan.windowing()
    aggregations = {u: (RowValues(), u) for u in union}
    keep = _kept_rows(plan, kept, maintainer)
    return SqlPlan(plan, strategy, aggregations, tuple(layouts), maintainer, keep)


def _kept_rows(
    plan: QueryPlan, layouts: list[StreamLayout], maintainer: GroupMaintainer
) -> TopRows | None:
    """The reducer's :class:`TopRows` for a query that shows only each key's first
    rows (:mod:`headwater.sql.plan.top_rows`), its order's columns named by their
    union columns; None where it keeps every row (a query whose changes are the
    new rows' counts it evaluated (``append``) needs them all)."""
    first = first_rows(plan)
    if first is None or maintainer.append is None or len(layouts) != 1:
        return None
    union = {c.lower(): u for c, u in zip(layouts[0].columns, layouts[0].union, strict=True)}
    if any(c.lower() not in union for c, _ in first.order):
        return None
    return TopRows(first.n, tuple((union[c.lower()], desc) for c, desc in first.order))


def group_sql(plan: QueryPlan, read: dict[str, frozenset[str]] | None = None) -> str:
    """The DuckDB text the general path evaluates per group: windowing TVFs bound to
    the group's window, or computed over the group's rows (keyed groups). ``read``:
    the streams' columns that the groups keep (:func:`stream_columns_read`)."""
    mode = "group" if plan.group_mode else "compute"
    reach = plan.key.reach if plan.group_mode else 0
    core = plan.key.interval.core() if plan.key.interval is not None else None
    return to_engine_sql(
        plan.group_query, "duckdb", columns_of(plan, read), mode=mode, reach=reach, core=core
    )


def union_rows(sql: SqlPlan) -> pd.DataFrame:
    """Every stream row once in the union layout, with its ptime. With several
    streams, each stream's union columns are NULL on the others' rows: integers
    and booleans then travel as objects, as floats would round integers past 2**53."""
    parts = []
    several = len(sql.query.streams) > 1
    for i, (table, layout) in enumerate(zip(sql.query.streams, sql.layouts, strict=True)):
        frame = table.frame
        part = {SOURCE: np.full(len(frame), i, dtype=np.int64)}
        for column, union in zip(layout.columns, layout.union, strict=True):
            values = frame[column]
            stamp = column in layout.timestamps
            part[union] = stamp_micros(values) if stamp else exact_numpy(values)
            if several and part[union].dtype.kind in "iub":
                part[union] = part[union].astype(object)
        part[EVENT_TIME] = event_millis(frame[table.event_time])
        part[KEY] = group_keys(frame, sql.query, part[EVENT_TIME], table.name)
        part[PTIME] = frame[PTIME].to_numpy(np.int64)
        parts.append(pd.DataFrame(part))
    rows = pd.concat(parts, ignore_index=True)
    return rows


def group_keys(
    frame: pd.DataFrame, plan: QueryPlan, event_ms: np.ndarray, table: str
) -> np.ndarray:
    """The model's key of each stream row (of stream ``table``): a keyed session's
    keys; the values of its maintenance key's columns (also of hopping windows
    keyed by columns too: a row is in several windows, but in one key); for
    tumbling windows the window's start, so that windows spread over the
    runner's state shards (a row is in one window; of cumulating windows, the
    period's start: a row's windows all start there); else one key."""
    if plan.keys:
        first, *rest = (frame[k].astype(str) for k in plan.keys)
        return (first.str.cat(rest, sep="|") if rest else first).to_numpy(object)
    if keyed_by_columns(plan):
        return joined_key_text(frame, plan.key.columns_of(table))
    fn = plan.window_fn
    if isinstance(fn, FixedWindows | CumulativeWindows):
        ms = np.nan_to_num(event_ms, nan=0.0).astype(np.int64)
        return (ms - np.mod(ms - fn.offset, fn.size)).astype(str).astype(object)
    return np.full(len(frame), ONE_GROUP[0], dtype=object)


def joined_key_text(frame: pd.DataFrame, columns) -> np.ndarray:
    """The key text of each row of ``frame`` by ``columns`` (:func:`key_text`, ``|``-joined)."""
    parts = [key_text(frame[c]) for c in columns]
    text = parts[0]
    for part in parts[1:]:
        text = text + "|" + part
    return text


#: A NULL key value's text (no value's text).
NULL_KEY = "\x00null"


def key_text(values: pd.Series) -> np.ndarray:
    """A key column's values as text, equal for equal values of different types
    (an integral float as its integer, a timestamp as epoch ms; NULL as one
    marker): a join key's columns of two streams meet in one group. Equal text
    of unequal values only shares a group, which stays exact."""
    null = values.isna().to_numpy(bool)
    if pd.api.types.is_datetime64_any_dtype(values):
        values = pd.Series(event_millis(values))
    if pd.api.types.is_integer_dtype(values):
        text = values.astype(str).to_numpy(object)
    elif pd.api.types.is_float_dtype(values):
        num = values.to_numpy(np.float64)
        integral = np.isfinite(num) & (num == np.floor(num))
        whole = np.where(integral, num, 0).astype(np.int64).astype(str)
        text = np.where(integral, whole, num.astype(str)).astype(object)
    else:
        text = values.astype(str).to_numpy(object)
    text[null] = NULL_KEY
    return text


def is_keyed(plan: QueryPlan) -> bool:
    """Whether the model plan of ``plan`` has a key (see :func:`group_keys`)."""
    return (
        keyed_by_columns(plan)
        or bool(plan.keys)
        or isinstance(plan.window_fn, FixedWindows | CumulativeWindows)
    )


def keyed_by_columns(plan: QueryPlan) -> bool:
    """Whether the model's key is the maintenance key's columns: groups of a key
    of columns, or hopping windows (not merging: a row is in one key) keyed by
    columns besides the window."""
    if plan.key.kind is KeyKind.COLUMNS:
        return True
    return bool(plan.key.parts) and isinstance(plan.window_fn, SlidingWindows)


# ------------------------------------------------------------------ replay


def run_stream(plan: QueryPlan, as_of: int | None = None, batched: bool = True) -> SqlRun:
    """Replay the query's streams up to processing time ``as_of`` (all when None).
    Corrections from an archive, when a stream asks for them, are applied on top
    of this run (:func:`headwater.sql.execute.correct.correct`). ``batched``: see
    :func:`compile_sql`."""
    for table in plan.streams:
        if not table.is_replay:
            raise SqlError(f"table {table.name!r} is a Spark stream: run it with runner='spark'")
    if plan.stages:
        return run_stages(plan, run_stream(plan.first_stage, as_of, batched))
    sql = compile_sql(plan, batched=batched)
    if not isinstance(sql, SqlPlan):  # the fast path of a windowed aggregate
        return SqlRun(*sql.run_local(steps_of, as_of))
    return _replay(sql, as_of)


def second_stage(plan: QueryPlan) -> SecondStage:
    """Stage 2 of a query in stages, before any change of stage 1."""
    second = plan.stages[1]
    return SecondStage(
        second,
        result_types(plan.first_stage),
        lambda rows: joined_key_text(rows, second.columns),
        plan.name,
        plan.functions,
        {t.name: t.local_frame() for t in plan.tables},
    )


def run_stages(plan: QueryPlan, run: SqlRun) -> SqlRun:
    """A query in stages (:mod:`headwater.sql.plan.stages`) from ``run``, stage 1's
    run (on any runner): its changelog fed step by step to stage 2 (one DuckDB
    query a step); the dead letters are stage 1's, which reads every stream."""
    stage = second_stage(plan)
    log = run.changelog
    start = min(START, int(log["ptime"].min())) if len(log) else START
    parts = [stage.begin(start)]
    parts += [stage.step(changes, int(now)) for now, changes in log.groupby("ptime", sort=True)]
    full = [p for p in parts if len(p)]
    if not full:
        return SqlRun(stage.columns, parts[0], run.dead_letters)
    # a column NULL in the start's rows takes its type from the later rows
    typed = [full[0].dropna(axis=1, how="all"), *full[1:]] if len(full) > 1 else full
    changelog = pd.concat(typed, ignore_index=True)[list(full[-1].columns)]
    return SqlRun(stage.columns, changelog, run.dead_letters)


def _replay(sql: SqlPlan, as_of: int | None) -> SqlRun:
    """The general path, step by step."""
    rows = union_rows(sql)
    values = sql.values
    forms = DeadLetterForms(
        null_event_time=lambda f: dead_letters(f, NULL_EVENT_TIME, sql),
        dropped=lambda d: dead_letters(d, d["reason"], sql),
    )
    steps = steps_of(sql.query, rows, as_of)
    data = StepInput(rows, EVENT_TIME, KEY, values)
    if each_row_path(sql):
        lateness, wait = sql.strategy.allowed_lateness, sql.query.emit.after_watermark
        changelog, dead = replay_each_row(
            data, steps, lateness, sql.maintainer, forms, as_of, wait=wait
        )
    else:
        reducer = Reducer(sql.strategy, sql.aggregations, sql.keep)
        ttl = state_ttl(sql.query)
        changelog, dead = replay(data, steps, reducer, sql.maintainer, forms, as_of, ttl)
    return SqlRun(sql.maintainer.columns, with_start(sql, changelog, steps[0]), dead)


def each_row_path(sql: SqlPlan) -> bool:
    """Whether the replay takes the stateless path (:func:`replay_each_row`): a
    query whose operators take each row on its own, evaluated batched."""
    return each_row_why_not(sql) is None


def each_row_why_not(sql: SqlPlan) -> str | None:
    """Why the replay does not take the stateless path (None: it does)."""
    reason = stateless_why_not(sql.query, holds_rows=True)
    if reason is None and not isinstance(sql.maintainer.batch, BatchQuery):
        return f"its query is not evaluated batched ({sql.maintainer.batch})"
    return reason


#: The processing time of a replayed query's start, before any of its steps: the
#: Unix epoch (or its first step, if earlier). A replay records when rows arrived,
#: not when the query started, and the bounded query over the rows arrived by any
#: time before the first is the query over none.
START = 0


def with_start(sql: SqlPlan, changelog: pd.DataFrame, ptimes: np.ndarray) -> pd.DataFrame:
    """``changelog`` after the changelog of the query's start (a global aggregate's
    row over no rows; :meth:`GroupMaintainer.begin`), at :data:`START`."""
    start = min(START, int(ptimes[0])) if len(ptimes) else START
    first = sql.maintainer.begin(start)
    if not len(first):
        return changelog
    if not len(changelog):
        return first
    # a column NULL in the start's rows takes its type from the later rows
    both = pd.concat([first.dropna(axis=1, how="all"), changelog], ignore_index=True)
    return both[list(changelog.columns)]


def state_ttl(plan: QueryPlan) -> int | None:
    """The time-to-live (ms) of the state of the query's keys: its key's, where the
    query's groups are keys in a global window (the watermark frees no state)."""
    return plan.key.expiring if isinstance(plan.window_fn, GlobalWindows) else None


def steps_of(plan: QueryPlan, rows: pd.DataFrame, as_of: int | None):
    """The processing times of the steps (up to ``as_of``) and the query's
    watermark after each: the smallest of its streams' watermarks, and the end
    of time after the last step of the input (when ``as_of`` reaches it). With a
    state time-to-live, also the times at which a key's state expires, within
    the input's span (the replay's processing time ends with its last step)."""
    times = [rows[PTIME].to_numpy(np.int64)]
    times += [
        t.watermarks["ptime"].to_numpy(np.int64) for t in plan.streams if t.watermarks is not None
    ]
    ptimes = distinct_sorted(np.concatenate(times))
    ttl = state_ttl(plan)
    if ttl is not None and len(ptimes):
        touched = ~np.isnan(rows[EVENT_TIME].to_numpy(np.float64))
        at = rows[PTIME].to_numpy(np.int64)[touched]
        expiries = expiry_times(rows[KEY].to_numpy(object)[touched], at, ttl)
        ptimes = union_sorted(ptimes, expiries[expiries <= ptimes[-1]])
    ended = len(ptimes) and (as_of is None or as_of >= ptimes[-1])
    if as_of is not None:
        ptimes = ptimes[ptimes <= as_of]
    marks = np.min([watermark_after_steps(t, ptimes) for t in plan.streams], axis=0)
    if ended:
        # A recorded stream is bounded: its last step ends the input (docs/semantics.md,
        # "End of input"), so every pending window fires and every timer is resolved.
        marks[-1] = END_OF_INPUT
    return ptimes, marks


def _as_given(values: np.ndarray, dtype) -> pd.Series | np.ndarray:
    """A column's values in the type the table gave it (a nullable integer carried
    as floats with NaN comes back as integers with NULLs)."""
    if values.dtype == dtype:
        return values
    try:
        return pd.Series(values).astype(dtype).array
    except (TypeError, ValueError):
        return values


def dead_letters(rows: pd.DataFrame, reason, sql: SqlPlan) -> pd.DataFrame:
    """Dead letters of a query: the query, the table, why, the window, then the
    row's columns (those of every stream when none was dropped, so that the
    columns are the same as with rows; the fast path's are these too:
    :func:`headwater.sql.execute.aggregate_local.dead_letters`)."""
    parts = []
    # a group reaching past its window's end (a closed join bound) names its window
    reach = sql.query.key.reach if sql.query.group_mode else 0
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
            if values is not None and column == "window_end":
                values = values - reach  # the window's own end, not its group's
            frame[column] = pd.to_datetime(values, unit="ms") if values is not None else pd.NaT
        given = sql.query.streams[i].frame
        for column, union in zip(layout.columns, layout.union, strict=True):
            values = mine[union].to_numpy()
            if column in layout.timestamps:
                values = micros_as_stamps(values)
            elif given is not None:
                values = _as_given(values, given[column].dtype)
            frame[column] = values
        parts.append(frame)
    if not parts:
        columns = ["query", "table", "reason", "window_start", "window_end"]
        columns += list(dict.fromkeys(c for layout in sql.layouts for c in layout.columns))
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)
