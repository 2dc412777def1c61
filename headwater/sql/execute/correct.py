"""Corrections of very late data from an archive: the hybrid model's batch module
as a source option (``'correction.archive'``, docs/sql.md, "Very late data").

A streaming query drops a row that arrives after its window's end plus the
allowed lateness (a dead letter). With corrections, every row of the query's
streams is archived (Parquet by event-time bucket, with its arrival time), the
query's dead letters are registered, and whenever the registered ones span
more than Gamma in event time (the hybrid model's rule,
:func:`headwater.model.correction.correction_points`), and at the end of the
input, the windows they fell in are recomputed exactly from the archive (the
query's own plan over the rows of those windows that had arrived, all in one
step, so each group's result is the query over all its rows). The difference
from what was last materialized for each group of those windows enters the
changelog as withdrawals and new rows at the correction's processing time,
numbered on from the group's ``ver``. So the final table view is the query
over all the input, while without corrections it is the query over the rows
that were not dropped.

A window with a dead letter is closed for good (the watermark never goes
back), so the stream module has nothing left to add to it: a change the
stream would still make to it after its correction (only a delayed firing of
rows the correction already read) is left out.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from headwater.model.correction import correction_points
from headwater.model.schema import DropReason
from headwater.model.time import MIN_TIMESTAMP, to_millis
from headwater.model.windows import Sessions
from headwater.sql.errors import SqlError
from headwater.sql.execute.local import SqlRun, run_stream
from headwater.sql.maintain.changelog import GROUP_COLUMNS, Materializer, in_order, member_of
from headwater.sql.parse.ddl import SourceDef
from headwater.sql.plan.catalog import GAMMA_MS, PTIME, Corrections, Table, event_millis
from headwater.sql.plan.emit import Materialization
from headwater.sql.plan.planner import QueryPlan

#: Event-time span of one archive directory (``bucket=<event time // BUCKET_MS>``).
BUCKET_MS = 60_000
#: Dead letters a correction consumes: rows a window no longer took.
REGISTERED = (DropReason.LATE.value, DropReason.CLOSED.value)
_WINDOW = ["__gs", "__ge"]
_BUCKET = "__bucket"


def corrections_option(d: SourceDef) -> Corrections | None:
    """The ``'correction.archive'`` / ``'correction.gamma'`` options of a source."""
    keys = sorted(k for k in d.options if k.startswith("correction."))
    unknown = [k for k in keys if k not in ("correction.archive", "correction.gamma")]
    if unknown:
        raise SqlError(
            f"table {d.name!r}: unknown option {unknown[0]!r}",
            d.line,
            None,
            "Use 'correction.archive' = 'DIR' and, optionally, 'correction.gamma' = '5 seconds'",
        )
    if not keys:
        return None
    if "correction.archive" not in d.options:
        raise SqlError(
            f"table {d.name!r}: 'correction.gamma' needs 'correction.archive'",
            d.line,
            None,
            "Add 'correction.archive' = 'DIR', the directory of the archive",
        )
    gamma = d.options.get("correction.gamma")
    try:
        return Corrections(d.options["correction.archive"], to_millis(gamma) if gamma else GAMMA_MS)
    except ValueError:
        raise SqlError(
            f"table {d.name!r}: cannot read 'correction.gamma' = {gamma!r} as a duration",
            d.line,
            None,
            "Write e.g. '5 seconds'",
        ) from None


def correct(plan: QueryPlan, run: SqlRun, as_of: int | None) -> SqlRun:
    """``run`` (the stream module's changelog and dead letters up to ``as_of``) with
    the corrections due by then; the dead letters gain ``corrected``."""
    missing = [t.name for t in plan.streams if t.correction is None]
    if missing:
        raise SqlError(
            f"query {plan.name}: stream {missing[0]!r} has no 'correction.archive', but "
            "another stream of the query is corrected",
            hint="A correction recomputes windows from every stream: archive each of them",
        )
    if isinstance(plan.window_fn, Sessions):
        raise SqlError(
            f"query {plan.name}: corrections recompute fixed windows; a late row can merge "
            "sessions",
            hint="Use Tumble or Hop windows, or drop 'correction.archive'",
        )
    roots = [archive(t) for t in plan.streams]
    late = registered(plan, run, as_of)
    gamma = min(t.correction.gamma for t in plan.streams)
    points = correction_points(late["ptime"].to_numpy(), late["et"].to_numpy(), gamma)
    points = sorted({*points, end_of_input(plan)})
    kept, fixes, lo = in_order(run.changelog), [], MIN_TIMESTAMP
    for t in (p for p in points if as_of is None or p <= as_of):
        chunk = late[(late["ptime"] > lo) & (late["ptime"] <= t)]
        lo = t
        if not len(chunk):
            continue
        windows = chunk[_WINDOW].drop_duplicates()
        # Closed windows: the stream module's later changes to them are left out.
        after = member_of(kept[_WINDOW], windows) & (kept["ptime"].to_numpy(np.int64) > t)
        kept = kept[~after]
        before = _concat([kept, *fixes])
        before = before[member_of(before[_WINDOW], windows)]
        fresh = _recompute(plan, roots, windows, t)
        fixes.append(_diff(before, fresh, run.columns, t))
    changelog = in_order(_concat([kept, *fixes]))
    dead = run.dead_letters.reset_index(drop=True)
    corrected = np.zeros(len(dead), dtype=bool)
    corrected[late.loc[late["ptime"] <= lo, "row"].to_numpy(np.int64)] = True
    return SqlRun(run.columns, changelog, dead.assign(corrected=corrected))


# ------------------------------------------------------------------ the archive


def archive(table: Table) -> Path:
    """Every row of ``table`` (a recorded stream) with its arrival time, as Parquet
    under ``<archive>/<table>/__bucket=<event time // BUCKET_MS>/``; written anew
    each run, so it is the input's."""
    root = Path(table.correction.archive) / table.name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    et = event_millis(table.frame[table.event_time])
    has_time = ~np.isnan(et)
    rows = table.frame[has_time].assign(**{_BUCKET: (et[has_time] // BUCKET_MS).astype(np.int64)})
    if len(rows):
        pq.write_to_dataset(
            pa.Table.from_pandas(rows, preserve_index=False), root, partition_cols=[_BUCKET]
        )
    return root


def _read(root: Path, table: Table, lo: int, hi: int, until: int) -> pd.DataFrame:
    """The archived rows with event times in ``[lo, hi)`` that had arrived by ``until``:
    only the buckets of that range are read."""
    buckets = range(lo // BUCKET_MS, (hi - 1) // BUCKET_MS + 1)
    present = [b for b in buckets if (root / f"{_BUCKET}={b}").is_dir()]
    if not present:
        return table.frame.iloc[:0]
    files = [str(f) for b in present for f in sorted((root / f"{_BUCKET}={b}").glob("*.parquet"))]
    rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
    rows = rows.astype(table.frame.dtypes.to_dict())
    et = event_millis(rows[table.event_time])
    keep = (et >= lo) & (et < hi) & (rows[PTIME].to_numpy(np.int64) <= until)
    return rows[keep].reset_index(drop=True)


# ------------------------------------------------------------------ the dead letters


def registered(plan: QueryPlan, run: SqlRun, as_of: int | None) -> pd.DataFrame:
    """The dead letters a correction consumes, in arrival order: their position in
    the run's dead letters (``row``), window (``__gs``, ``__ge``), event time
    (``et``) and arrival time (``ptime``, ms).

    A dead letter does not carry its arrival time, but it is determined: the rows
    of one event time fall in the same windows, and a window that dropped one of
    them drops every later one (the watermark never goes back), so the ``d`` dead
    letters of a window and event time are the ``d`` rows of that event time
    that arrived last."""
    dead = run.dead_letters.reset_index(drop=True)
    parts = [pd.DataFrame(columns=["row", *_WINDOW, "et", "ptime"], dtype=np.int64)]
    for table in plan.streams:
        mine = dead[dead["reason"].isin(REGISTERED) & (dead["table"] == table.name)]
        if not len(mine):
            continue
        letters = pd.DataFrame(
            {
                "row": mine.index.to_numpy(np.int64),
                "__gs": event_millis(mine["window_start"]).astype(np.int64),
                "__ge": event_millis(mine["window_end"]).astype(np.int64),
                "et": event_millis(mine[table.event_time]).astype(np.int64),
            }
        )
        letters["rank"] = letters.groupby(["__gs", "__ge", "et"]).cumcount()
        arrival = table.frame[PTIME].to_numpy(np.int64)
        et = event_millis(table.frame[table.event_time])
        arrived = ~np.isnan(et) & (arrival <= (np.inf if as_of is None else as_of))
        rows = pd.DataFrame({"et": et[arrived].astype(np.int64), "ptime": arrival[arrived]})
        rows = rows.iloc[np.argsort(-rows["ptime"].to_numpy(), kind="stable")]
        rows["rank"] = rows.groupby("et").cumcount()  # 0: the last to arrive
        found = letters.merge(rows, on=["et", "rank"], how="left").drop(columns="rank")
        parts.append(found.astype({"ptime": np.int64}))
    late = pd.concat(parts, ignore_index=True)
    return late.sort_values(["ptime", "row"], kind="stable").reset_index(drop=True)


def end_of_input(plan: QueryPlan) -> int:
    """The processing time of the query's last step (its streams' last row or
    watermark line): where the remaining dead letters are corrected."""
    times = [t.frame[PTIME].to_numpy(np.int64) for t in plan.streams]
    marks = [t.watermarks for t in plan.streams if t.watermarks is not None]
    times += [m["ptime"].to_numpy(np.int64) for m in marks]
    return int(np.max(np.concatenate(times), initial=MIN_TIMESTAMP))


# ------------------------------------------------------------------ one correction


def _recompute(plan: QueryPlan, roots: list[Path], windows: pd.DataFrame, t: int) -> pd.DataFrame:
    """The exact rows of every group of ``windows``: the query's plan over the
    archived rows of those windows that had arrived by ``t``, all in one step with
    no watermark (nothing is late) and every change materialized."""
    lo, hi = int(windows["__gs"].min()), int(windows["__ge"].max())
    streams = tuple(
        replace(
            table,
            frame=_read(root, table, lo, hi, t).assign(**{PTIME: t}),
            watermark=None,
            watermarks=None,
            correction=None,
        )
        for table, root in zip(plan.streams, roots, strict=True)
    )
    bounded = replace(plan, streams=streams, emit=Materialization(stream=True))
    log = run_stream(bounded).changelog
    return log[member_of(log[_WINDOW], windows)]


def _diff(before: pd.DataFrame, fresh: pd.DataFrame, columns: list[str], t: int) -> pd.DataFrame:
    """The changelog rows that take the groups of ``before`` (their changes so far)
    to ``fresh`` (their exact rows) at processing time ``t``."""
    keys, group = [*GROUP_COLUMNS, *columns], list(GROUP_COLUMNS)
    state = Materializer(columns)
    if not len(before):  # nothing materialized yet: every fresh row is new
        return state.apply(fresh[group], fresh[keys], t)
    sign = np.where(before["undo"].to_numpy(bool), -1, 1)
    net = before[keys].assign(__n=sign).groupby(keys, dropna=False, sort=False)["__n"].sum()
    net = net[net > 0].reset_index()
    state.last = net.loc[net.index.repeat(net["__n"].to_numpy(np.int64)), keys]
    versions = before.groupby(group, dropna=False, sort=False).size().rename("ver")
    state.versions = versions.reset_index().astype({"ver": np.int64})
    results = fresh[keys] if len(fresh) else state.last.iloc[:0]
    fired = _concat([before[group], fresh[group]]).drop_duplicates()
    return state.apply(fired, results, t)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The non-empty frames one after the other (an empty frame's untyped columns
    would turn integers into objects)."""
    full = [f for f in frames if len(f)]
    return pd.concat(full, ignore_index=True) if full else frames[0].iloc[:0]
