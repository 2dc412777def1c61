"""Sinks for windowed results: a changelog, a current-results table, dead letters.

Every sink is a callable ``sink(batch, batch_id)``, the signature of Structured
Streaming's ``foreachBatch``, so it plugs into
:meth:`headwater.api.WindowedAggregation.start`::

    changelog = ChangelogSink("/data/scores/changelog")
    results = CurrentResultsSink("/data/scores.duckdb", aggregation=agg)  # DuckDB
    # or CurrentResultsSink("postgresql://user@host/db", aggregation=agg) # PostgreSQL
    agg.start(
        checkpoint_location="/data/scores/checkpoint",
        panes_sink=fan_out(changelog, results),
        dead_letter_sink=DeadLetterSink("/data/scores/dead_letters"),
    )

A micro-batch runs again after a failure (same ``batch_id``, same rows), so
every sink here is idempotent per batch id: the Parquet sinks overwrite the
directory ``<path>/batch_id=N``; the current-results table records the last
applied batch id in a metadata table, in the same transaction as the rows, and
skips batches it has already applied. ``batch`` may be a Spark DataFrame (the
streaming case), a pandas DataFrame or a pyarrow Table (e.g. the local
runner's panes). Anything else is a plain ``foreachBatch`` function; use
:func:`fan_out` to send the panes to several sinks.

Pane rows have the columns of :meth:`~headwater.api.WindowedAggregation.to_spark`::

    <key columns>, window_start, window_end, <aggregations>,
    timestamp, pane_index, nonspeculative_index, timing, is_first, is_last, is_retraction

(the runner's raw output, with its ``kind`` column, is accepted too: the pane
sinks keep the panes, :class:`DeadLetterSink` the dropped elements).

The current-results table
-------------------------
:class:`CurrentResultsSink` keeps one row per ``(key columns, window_start,
window_end)`` (its primary key): the window's current value and the metadata
of the latest pane applied to it, plus the ``batch_id`` that wrote it. Each
micro-batch is applied in ONE transaction, set-based (the batch is collected
as Arrow, reduced to one row per window in Arrow, staged in bulk, then one
``DELETE`` and one ``INSERT ... ON CONFLICT DO UPDATE``), never a round trip
per row. Precisely:

* The rows of one window in a batch are ordered by ``pane_index``, a pane
  before a retraction of the same index (a retraction row repeats the
  metadata of the pane it withdraws, so retracting pane *p* comes after pane
  *p* and before pane *p + 1*). The window's *last* row decides.
* ``accumulating`` / ``retracting`` (a pane holds everything so far): the last
  row is a pane -> upsert it (the latest pane wins); it is a retraction -> the
  window's row is deleted (a withdrawn result with no replacement, e.g. a
  session merged into a larger one). An upsert never replaces a row of a later
  pane, and a retraction never deletes one (``pane_index`` guards), so
  results cannot go back in time.
* ``discarding`` (a pane holds only what is new): the window's panes are
  combined with the stored value by each aggregation's merge: ``sum`` (for
  ``hw.sum`` and ``hw.count``: add), ``min``, ``max``. Other combiners (mean,
  lists, sketches) cannot be merged from their outputs and are rejected when
  the sink is created; so are merging windows (sessions), whose merges can
  only be expressed with retractions.

The accumulation mode and the merges come from ``aggregation=`` (the
pipeline's :class:`~headwater.api.WindowedAggregation`), or from
``accumulation=`` and ``merge=``; by default panes are taken as accumulating.
Null window bounds (the global window in ``TIMESTAMP`` form) are stored as
``-infinity`` / ``infinity`` (and read back as null by :meth:`~CurrentResultsSink.read`);
null keys are rejected (a primary key cannot hold them).

Batch ids: a sink skips every ``batch_id`` up to the last one it applied
(per ``sink_id``, by default the table name). A query restarted from a NEW
checkpoint starts again at batch 0: give it a new table, a new ``sink_id``,
or call :meth:`~CurrentResultsSink.reset` first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.model.panes import Accumulation

__all__ = [
    "ChangelogSink",
    "DeadLetterSink",
    "CurrentResultsSink",
    "duckdb_results",
    "postgres_results",
    "fan_out",
    "parquet_sink",
]

log = logging.getLogger(__name__)

#: Pane metadata columns, in output order (the last one is not stored in the table).
PANE_META = (
    "timestamp",
    "pane_index",
    "nonspeculative_index",
    "timing",
    "is_first",
    "is_last",
    "is_retraction",
)
#: Column of the current-results table naming the batch that wrote the row.
BATCH_COL = "batch_id"
#: Name of the metadata table (in the results table's schema): ``sink_id -> batch_id``.
META_TABLE = "headwater_sink_batches"
#: Merges supported for discarding panes (and the names accepted for them).
MERGES = {"sum": "sum", "add": "sum", "count": "sum", "min": "min", "max": "max"}

Sink = Callable[[Any, int], None]


# ------------------------------------------------------------------ batch input


def _is_spark(df: Any) -> bool:
    return type(df).__module__.startswith("pyspark.") and hasattr(df, "sparkSession")


def _columns(df: Any) -> list[str]:
    if isinstance(df, pa.Table):
        return list(df.column_names)
    return list(df.columns)


def _panes_only(df: Any) -> Any:
    """The pane rows of a batch (drops the runner's ``kind``/``dropped`` columns)."""
    if "kind" not in _columns(df):
        return df
    if _is_spark(df):
        from pyspark.sql import functions as F

        return df.where(F.col("kind") == "pane").drop("kind", "dropped")
    if isinstance(df, pa.Table):
        out = df.filter(pc.equal(df["kind"], "pane"))
        return out.drop_columns([c for c in ("kind", "dropped") if c in out.column_names])
    out = df[df["kind"] == "pane"]
    return out.drop(columns=[c for c in ("kind", "dropped") if c in out.columns])


def _dead_letters_only(df: Any) -> Any:
    if "kind" not in _columns(df):
        return df
    if not _is_spark(df):
        raise TypeError("the runner's raw output is split by headwater.runners.spark.streaming")
    from headwater.runners.spark.streaming import dead_letters

    return dead_letters(df)


def _to_arrow(df: Any) -> pa.Table:
    """The batch as one Arrow table (a Spark DataFrame is collected with Arrow)."""
    if isinstance(df, pa.Table):
        return df
    if isinstance(df, pa.RecordBatch):
        return pa.Table.from_batches([df])
    if _is_spark(df):
        return df.toArrow()
    import pandas as pd

    if isinstance(df, pd.DataFrame):
        return pa.Table.from_pandas(df, preserve_index=False)
    raise TypeError(f"a sink takes a Spark or pandas DataFrame or an Arrow table, not {df!r}")


def fan_out(*sinks: Sink | None) -> Sink:
    """One ``foreachBatch`` function calling each sink in turn with the same batch.

    :meth:`~headwater.api.WindowedAggregation.start` persists the micro-batch
    while its sinks run, so the panes are computed once. A sink that fails
    fails the batch; it is then re-run whole, hence every sink must be
    idempotent per batch id (those of this module are).
    """
    chosen = [s for s in sinks if s is not None]
    for s in chosen:
        if not callable(s):
            raise TypeError(f"not a sink (f(batch, batch_id)): {s!r}")

    def sink(batch: Any, batch_id: int) -> None:
        for s in chosen:
            s(batch, batch_id)

    return sink


# --------------------------------------------------------------- Parquet sinks


class _ParquetBatches:
    """Each non-empty micro-batch to ``<path>/batch_id=N`` (overwritten when re-run)."""

    def __init__(self, path: str | os.PathLike, *, files_per_batch: int | None = None) -> None:
        self.path = os.fspath(path).rstrip("/")
        if files_per_batch is not None and files_per_batch < 1:
            raise ValueError("files_per_batch must be a positive number (or None)")
        self.files_per_batch = files_per_batch

    def batch_path(self, batch_id: int) -> str:
        return f"{self.path}/batch_id={int(batch_id)}"

    def _select(self, batch: Any) -> Any:
        return batch

    def __call__(self, batch: Any, batch_id: int) -> None:
        target = self.batch_path(batch_id)
        batch = self._select(batch)
        if _is_spark(batch):
            if batch.isEmpty():
                # A re-run that yields nothing must not leave an earlier attempt's rows.
                _delete_dir(target, batch.sparkSession)
                return
            out = batch if self.files_per_batch is None else batch.coalesce(self.files_per_batch)
            out.write.mode("overwrite").parquet(target)
            return
        import pyarrow.parquet as pq

        table = _to_arrow(batch)
        _delete_dir(target)
        if table.num_rows:
            os.makedirs(target, exist_ok=True)
            pq.write_table(table, os.path.join(target, "part-00000.parquet"))

    def read(self, spark: Any = None) -> Any:
        """Everything written so far, with a ``batch_id`` column: a Spark DataFrame
        when ``spark`` is given, else a pandas DataFrame (empty if nothing yet)."""
        if spark is not None:
            return spark.read.option("basePath", self.path).parquet(self.path)
        import pyarrow.dataset as ds

        if not os.path.isdir(self.path) or not any(
            name.startswith("batch_id=") for name in os.listdir(self.path)
        ):
            import pandas as pd

            return pd.DataFrame()
        table = ds.dataset(self.path, format="parquet", partitioning="hive").to_table()
        frame = table.to_pandas()
        frame["batch_id"] = frame["batch_id"].astype("int64")
        return frame

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


def _delete_dir(path: str, spark: Any = None) -> None:
    """Remove ``path`` recursively if it exists (a Hadoop path when ``spark`` is given)."""
    if spark is not None:
        try:
            jvm = spark.sparkContext._jvm
            hpath = jvm.org.apache.hadoop.fs.Path(path)
            fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
            if fs.exists(hpath):
                fs.delete(hpath, True)
            return
        except Exception:  # noqa: BLE001 - no JVM access (Spark Connect): local paths only
            pass
    local = path[len("file:") :] if path.startswith("file:") else path
    if os.path.isdir(local):
        shutil.rmtree(local)


class ChangelogSink(_ParquetBatches):
    """Append-only Parquet changelog: every pane row of every micro-batch,
    retractions included, under ``<path>/batch_id=N/``.

    Replaying it gives the results at any point: for sums and counts, add the
    values with retractions negated; in general, per window the last row by
    ``(batch_id, pane_index, is_retraction)`` (see the module docstring).
    Idempotent per batch id: a re-run batch overwrites its own directory.
    ``files_per_batch`` coalesces each batch to that many files.
    """

    def _select(self, batch: Any) -> Any:
        return _panes_only(batch)


class DeadLetterSink(_ParquetBatches):
    """Parquet files of the elements a streaming query dropped (``dead_letter_sink``):
    key columns, the element's window, ``event_time``, ``reason`` and the input
    columns the aggregations read, under ``<path>/batch_id=N/``."""

    def _select(self, batch: Any) -> Any:
        return _dead_letters_only(batch)


def parquet_sink(path: str | os.PathLike) -> Sink:
    """A sink writing each micro-batch to ``path/batch_id=N`` (overwrite: idempotent);
    panes and dead letters alike (as ``headwater.runners.spark.streaming.parquet_sink``)."""
    return _ParquetBatches(path)


# ------------------------------------------------------- the current-results table


@dataclass(frozen=True)
class _Layout:
    keys: tuple[str, ...]
    values: tuple[str, ...]
    meta: tuple[str, ...]  # stored pane metadata present in the batch (pane_index included)
    types: dict[str, pa.DataType]

    @property
    def windows(self) -> tuple[str, str]:
        return ("window_start", "window_end")

    @property
    def primary_key(self) -> tuple[str, ...]:
        return (*self.keys, *self.windows)

    @property
    def stored(self) -> tuple[str, ...]:
        """Columns of the table, ``batch_id`` excluded."""
        return (*self.primary_key, *self.values, *self.meta)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _qualified(table: str) -> tuple[str | None, str]:
    schema, _, name = table.rpartition(".")
    if not name:
        raise ValueError(f"bad table name {table!r}")
    return (schema or None), name


class CurrentResultsSink:
    """A table of current results, kept up to date by per-batch upserts.

    ``target``: a DuckDB database file (the default backend, embedded; ``":memory:"``
    for a process-local one) or a PostgreSQL URL (``postgresql://...``; psycopg 3).
    ``table``: the results table (``name`` or ``schema.name``), created on the first
    non-empty batch from the batch's columns. ``aggregation``: the pipeline (a
    :class:`~headwater.api.WindowedAggregation`) whose key columns, aggregations
    and accumulation mode the table follows; without it ``key_cols`` default to
    the columns before ``window_start``, ``accumulation`` to accumulating, and
    discarding panes need ``merge={"column": "sum" | "min" | "max"}``.
    ``sink_id`` names this writer in the metadata table (default: the table name).

    See the module docstring for the exact semantics.
    """

    def __init__(
        self,
        target: str | os.PathLike,
        *,
        table: str = "current_results",
        backend: str | None = None,
        aggregation: Any = None,
        key_cols: Sequence[str] | None = None,
        accumulation: Accumulation | str | None = None,
        merge: Mapping[str, str] | None = None,
        sink_id: str | None = None,
    ) -> None:
        target = os.fspath(target)
        if backend is None:
            is_pg = target.startswith(("postgresql://", "postgres://"))
            backend = "postgres" if is_pg else "duckdb"
        if backend == "duckdb":
            self._store: _Store = _DuckDBStore(target)
        elif backend in ("postgres", "postgresql"):
            self._store = _PostgresStore(target)
        else:
            raise ValueError(f"backend must be 'duckdb' or 'postgres', got {backend!r}")
        self.target = target
        self.backend = self._store.dialect
        self.table = table
        self.sink_id = sink_id or table
        self._schema, self._name = _qualified(table)

        self.value_cols: tuple[str, ...] | None = None
        strategy = None
        if aggregation is not None:
            for attr in ("key_cols", "aggregations", "strategy"):
                if not hasattr(aggregation, attr):
                    raise TypeError(
                        f"aggregation must be a headwater WindowedAggregation, got {aggregation!r}"
                    )
            strategy = aggregation.strategy
            if key_cols is None:
                key_cols = aggregation.key_cols
            if accumulation is None:
                accumulation = strategy.accumulation
            self.value_cols = tuple(aggregation.aggregations)
        self.key_cols = None if key_cols is None else tuple(key_cols)
        self.accumulation = Accumulation.of(accumulation or Accumulation.ACCUMULATING)

        self.merge: dict[str, str] | None = None
        if self.accumulation == Accumulation.DISCARDING:
            if strategy is not None and strategy.window_fn.is_merging:
                raise ValueError(
                    f"a current-results table cannot follow DISCARDING panes of merging "
                    f"windows ({strategy.window_fn!r}): merged windows are only withdrawn "
                    f"by retractions; use accumulation='retracting'"
                )
            if merge is None and aggregation is not None:
                merge = {
                    name: _merge_of(name, a.combine_fn)
                    for name, a in aggregation.aggregations.items()
                }
            if merge is None:
                raise ValueError(
                    "DISCARDING panes hold only what is new: give merge={'column': 'sum' | "
                    "'min' | 'max'} for every aggregation, or aggregation=<the pipeline>"
                )
            self.merge = {}
            for name, how in merge.items():
                if str(how).lower() not in MERGES:
                    raise ValueError(
                        f"cannot merge discarding panes of {name!r} with {how!r}: "
                        f"supported: {sorted(set(MERGES.values()))}"
                    )
                self.merge[name] = MERGES[str(how).lower()]
        self._layout: _Layout | None = None

    # -- the sink -------------------------------------------------------------
    def __call__(self, batch: Any, batch_id: int) -> None:
        self.write(batch, batch_id)

    def write(self, batch: Any, batch_id: int) -> bool:
        """Apply one micro-batch of panes. Returns False if it was skipped (already
        applied, or empty)."""
        batch_id = int(batch_id)
        last = self.last_batch_id()
        if last is not None and batch_id <= last:
            log.info("%r: batch %d already applied (last %d): skipped", self, batch_id, last)
            return False
        table = _to_arrow(_panes_only(batch))
        if table.num_rows == 0:
            return False
        layout = self._layout_of(table)
        staged = self._reduce(table, layout)
        applied = self._store.apply(self, layout, staged, batch_id)
        if not applied:
            log.info("%r: batch %d already applied: skipped", self, batch_id)
        return applied

    # -- one row per window -----------------------------------------------------
    def _layout_of(self, table: pa.Table) -> _Layout:
        names = list(table.column_names)
        for c in ("window_start", "window_end", "pane_index"):
            if c not in names:
                raise ValueError(f"not a batch of panes: no {c!r} column (columns: {names})")
        if self.key_cols is not None:
            keys = self.key_cols
        else:
            keys = tuple(names[: names.index("window_start")])
        if self.value_cols is not None:
            values = self.value_cols
        else:
            skip = {*keys, "window_start", "window_end", *PANE_META, BATCH_COL}
            values = tuple(n for n in names if n not in skip)
        meta = tuple(m for m in PANE_META[:-1] if m in names)
        for c in (*keys, *values):
            if c not in names:
                raise ValueError(f"column {c!r} missing from the batch (columns: {names})")
        if BATCH_COL in (*keys, *values):
            raise ValueError(f"column name {BATCH_COL!r} is reserved by CurrentResultsSink")
        if self.merge is not None:
            missing = [v for v in values if v not in self.merge]
            if missing:
                raise ValueError(f"discarding panes: no merge given for {missing}")
        types = {n: table.schema.field(n).type for n in names}
        layout = _Layout(tuple(keys), tuple(values), meta, types)
        if self._layout is not None and self._layout.stored != layout.stored:
            raise ValueError(
                f"batch columns changed: {list(layout.stored)} != {list(self._layout.stored)}"
            )
        self._layout = layout
        return layout

    def _reduce(self, table: pa.Table, layout: _Layout) -> pa.Table:
        """The batch reduced to one row per window (vectorized, in Arrow)."""
        for k in layout.keys:
            if table[k].null_count:
                raise ValueError(
                    f"{table[k].null_count} pane rows have a null key {k!r}: a current-results "
                    f"table is keyed by (keys, window) and cannot hold null keys"
                )
        for w in layout.windows:
            if table[w].null_count and not pa.types.is_timestamp(table[w].type):
                raise ValueError(f"{table[w].null_count} pane rows have a null {w!r}")
        if "is_retraction" not in table.column_names:
            table = table.append_column(
                "is_retraction", pa.array(np.zeros(table.num_rows, dtype=bool))
            )
        retracting = pc.fill_null(table["is_retraction"], False)
        has_retractions = pc.any(retracting).as_py() or False
        if self.merge is not None and has_retractions:
            raise ValueError("retractions in a batch of DISCARDING panes: check accumulation=")
        table = table.set_column(
            table.column_names.index("is_retraction"), "is_retraction", retracting
        )
        # Per window, order by pane index, a pane before its retraction: the last row wins.
        order = pc.sort_indices(
            table, sort_keys=[("pane_index", "ascending"), ("is_retraction", "ascending")]
        )
        columns = [*layout.stored, "is_retraction"]
        table = table.select(columns).take(order)
        table = table.append_column("__hw_pos", pa.array(np.arange(table.num_rows)))
        aggs: list[tuple[str, str]] = [("__hw_pos", "max")]
        if self.merge is not None:
            aggs += [(v, self.merge[v]) for v in layout.values]
        grouped = table.group_by(list(layout.primary_key), use_threads=False).aggregate(aggs)
        last = table.take(grouped["__hw_pos_max"]).drop_columns(["__hw_pos"])
        if self.merge is not None:
            for v in layout.values:
                merged = grouped[f"{v}_{self.merge[v]}"].cast(last.schema.field(v).type)
                last = last.set_column(last.column_names.index(v), v, merged)
        return last

    # -- reading and housekeeping ---------------------------------------------------
    def last_batch_id(self) -> int | None:
        """The last batch id applied by this ``sink_id`` (None: none yet)."""
        return self._store.last_batch_id(self)

    def read(self):
        """The table as a pandas DataFrame, sorted by its primary key (infinite
        window bounds read back as null). Empty if the table does not exist yet."""
        return self._store.read(self)

    def reset(self) -> None:
        """Drop the table and forget this ``sink_id``'s batches (a fresh start)."""
        self._store.reset(self)
        self._layout = None

    def close(self) -> None:
        """Close a kept connection (PostgreSQL, in-memory DuckDB)."""
        self._store.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_store"] = self._store.unconnected()
        return state

    def __repr__(self) -> str:
        return (
            f"CurrentResultsSink({self._store.display()}, table={self.table!r}, "
            f"accumulation={self.accumulation.value!r})"
        )

    # -- SQL shared by the backends ----------------------------------------------
    def _table_sql(self) -> str:
        return _q(self._name) if self._schema is None else f"{_q(self._schema)}.{_q(self._name)}"

    def _meta_sql(self) -> str:
        name = _q(META_TABLE)
        return name if self._schema is None else f"{_q(self._schema)}.{name}"

    def _ddl(self, layout: _Layout, type_of: Callable[[str, pa.DataType], str]) -> list[str]:
        cols = [f"{_q(c)} {type_of(c, layout.types[c])}" for c in layout.stored]
        cols.append(f"{_q(BATCH_COL)} BIGINT NOT NULL")
        pk = ", ".join(_q(c) for c in layout.primary_key)
        out = []
        if self._schema is not None:
            out.append(f"CREATE SCHEMA IF NOT EXISTS {_q(self._schema)}")
        out.append(
            f"CREATE TABLE IF NOT EXISTS {self._table_sql()} ({', '.join(cols)}, "
            f"PRIMARY KEY ({pk}))"
        )
        out.append(
            f"CREATE TABLE IF NOT EXISTS {self._meta_sql()} (sink_id VARCHAR PRIMARY KEY, "
            f"batch_id BIGINT NOT NULL)"
        )
        return out

    def _source_expr(self, layout: _Layout, col: str) -> str:
        expr = f"s.{_q(col)}"
        t = layout.types[col]
        if col in layout.windows and pa.types.is_timestamp(t):
            inf = "-infinity" if col == "window_start" else "infinity"
            sql_type = "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
            expr = f"COALESCE({expr}, '{inf}'::{sql_type})"
        return expr

    def _apply_sql(self, layout: _Layout, stage: str, batch_id: int) -> tuple[str, str]:
        """(delete, upsert): withdraw retracted windows, then upsert the new panes."""
        target = self._table_sql()
        match = " AND ".join(
            f"t.{_q(c)} = {self._source_expr(layout, c)}" for c in layout.primary_key
        )
        delete = (
            f"DELETE FROM {target} AS t USING {stage} AS s WHERE s.is_retraction AND {match} "
            f"AND t.pane_index <= s.pane_index"
        )
        cols = [*layout.stored, BATCH_COL]
        exprs = [self._source_expr(layout, c) for c in layout.stored] + [str(int(batch_id))]
        sets = []
        for c in (*layout.values, *layout.meta, BATCH_COL):
            how = self.merge.get(c) if self.merge is not None and c in layout.values else None
            old, new = f"t.{_q(c)}", f"excluded.{_q(c)}"
            if how == "sum":
                value = (
                    f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} "
                    f"ELSE {old} + {new} END"
                )
            elif how == "min":
                value = f"LEAST({old}, {new})"
            elif how == "max":
                value = f"GREATEST({old}, {new})"
            else:
                value = new
            sets.append(f"{_q(c)} = {value}")
        newer = ">" if self.merge is not None else ">="
        upsert = (
            f"INSERT INTO {target} AS t ({', '.join(_q(c) for c in cols)}) "
            f"SELECT {', '.join(exprs)} FROM {stage} AS s WHERE NOT s.is_retraction "
            f"ON CONFLICT ({', '.join(_q(c) for c in layout.primary_key)}) DO UPDATE SET "
            f"{', '.join(sets)} WHERE excluded.pane_index {newer} t.pane_index"
        )
        return delete, upsert


def _merge_of(name: str, fn: Any) -> str:
    from headwater.model import combiners as C

    if isinstance(fn, (C.Sum, C.Count)):
        return "sum"
    if isinstance(fn, C.Min):
        return "min"
    if isinstance(fn, C.Max):
        return "max"
    raise ValueError(
        f"aggregation {name!r} ({fn!r}): DISCARDING panes can only be combined in a "
        f"current-results table for sum, count, min and max (the pane outputs of other "
        f"combiners do not merge); use accumulation='accumulating' or 'retracting'"
    )


def duckdb_results(path: str | os.PathLike, **kwargs: Any) -> CurrentResultsSink:
    """A :class:`CurrentResultsSink` in the DuckDB database file ``path``."""
    return CurrentResultsSink(path, backend="duckdb", **kwargs)


def postgres_results(url: str, **kwargs: Any) -> CurrentResultsSink:
    """A :class:`CurrentResultsSink` in the PostgreSQL database at ``url``."""
    return CurrentResultsSink(url, backend="postgres", **kwargs)


# ----------------------------------------------------------------------- backends


class _Store:
    dialect = ""

    def apply(
        self, sink: CurrentResultsSink, layout: _Layout, staged: pa.Table, batch_id: int
    ) -> bool:
        raise NotImplementedError

    def last_batch_id(self, sink: CurrentResultsSink) -> int | None:
        raise NotImplementedError

    def read(self, sink: CurrentResultsSink):
        raise NotImplementedError

    def reset(self, sink: CurrentResultsSink) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def unconnected(self) -> _Store:
        return self

    def display(self) -> str:
        return ""


def _read_sql(sink: CurrentResultsSink, columns: list[tuple[str, str]]) -> str:
    """SELECT of the table with infinite timestamps (window bounds) as null."""
    exprs = []
    for name, data_type in columns:
        if "TIMESTAMP" in data_type.upper():
            exprs.append(f"CASE WHEN isfinite({_q(name)}) THEN {_q(name)} END AS {_q(name)}")
        else:
            exprs.append(_q(name))
    return f"SELECT {', '.join(exprs)} FROM {sink._table_sql()}"


def _order(frame, sink: CurrentResultsSink):
    keys = [c for c in (*(sink.key_cols or ()), "window_start", "window_end") if c in frame]
    if sink.key_cols is None and "window_start" in frame:
        keys = list(frame.columns[: list(frame.columns).index("window_end") + 1])
    return frame.sort_values(keys, kind="stable").reset_index(drop=True) if keys else frame


class _DuckDBStore(_Store):
    dialect = "duckdb"

    def __init__(self, path: str) -> None:
        self.path = path
        self._memory = None

    def display(self) -> str:
        return repr(self.path)

    def unconnected(self) -> _DuckDBStore:
        return _DuckDBStore(self.path)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Any]:
        import duckdb

        if self.path == ":memory:":
            if self._memory is None:
                self._memory = duckdb.connect(":memory:")
            yield self._memory
            return
        # A connection per batch: the file is not locked between batches, so other
        # processes can read it.
        con = duckdb.connect(self.path)
        try:
            yield con
        finally:
            con.close()

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None

    @staticmethod
    def type_of(col: str, t: pa.DataType) -> str:
        simple = {
            pa.int8(): "TINYINT",
            pa.int16(): "SMALLINT",
            pa.int32(): "INTEGER",
            pa.int64(): "BIGINT",
            pa.uint8(): "UTINYINT",
            pa.uint16(): "USMALLINT",
            pa.uint32(): "UINTEGER",
            pa.uint64(): "UBIGINT",
            pa.float16(): "FLOAT",
            pa.float32(): "FLOAT",
            pa.float64(): "DOUBLE",
            pa.bool_(): "BOOLEAN",
            pa.string(): "VARCHAR",
            pa.large_string(): "VARCHAR",
            pa.binary(): "BLOB",
            pa.large_binary(): "BLOB",
            pa.date32(): "DATE",
            pa.date64(): "DATE",
        }
        if t in simple:
            return simple[t]
        if pa.types.is_timestamp(t):
            return "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
        if pa.types.is_decimal(t):
            return f"DECIMAL({t.precision}, {t.scale})"
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return _DuckDBStore.type_of(col, t.value_type) + "[]"
        raise TypeError(f"column {col!r}: no DuckDB type for Arrow type {t}")

    def _last(self, con: Any, sink: CurrentResultsSink) -> int | None:
        try:
            rows = con.execute(
                f"SELECT batch_id FROM {sink._meta_sql()} WHERE sink_id = ?", [sink.sink_id]
            ).fetchall()
        except Exception as exc:  # noqa: BLE001
            if "does not exist" in str(exc):
                return None
            raise
        return int(rows[0][0]) if rows else None

    def last_batch_id(self, sink: CurrentResultsSink) -> int | None:
        with self._connect() as con:
            return self._last(con, sink)

    def apply(self, sink, layout, staged, batch_id) -> bool:
        stage = "__hw_stage"
        with self._connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                for ddl in sink._ddl(layout, self.type_of):
                    con.execute(ddl)
                last = self._last(con, sink)
                if last is not None and batch_id <= last:
                    con.execute("ROLLBACK")
                    return False
                con.register(stage, staged)
                try:
                    delete, upsert = sink._apply_sql(layout, stage, batch_id)
                    if pc.any(staged["is_retraction"]).as_py():
                        con.execute(delete)
                    con.execute(upsert)
                finally:
                    con.unregister(stage)
                con.execute(
                    f"INSERT INTO {sink._meta_sql()} (sink_id, batch_id) VALUES (?, ?) "
                    f"ON CONFLICT (sink_id) DO UPDATE SET batch_id = excluded.batch_id",
                    [sink.sink_id, int(batch_id)],
                )
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    con.execute("ROLLBACK")
                raise
        return True

    def read(self, sink):
        import pandas as pd

        with self._connect() as con:
            schema = sink._schema or "main"
            columns = con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
                [schema, sink._name],
            ).fetchall()
            if not columns:
                return pd.DataFrame()
            frame = con.execute(_read_sql(sink, columns)).df()
        return _order(frame, sink)

    def reset(self, sink) -> None:
        with self._connect() as con:
            con.execute(f"DROP TABLE IF EXISTS {sink._table_sql()}")
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {sink._meta_sql()} (sink_id VARCHAR PRIMARY KEY, "
                f"batch_id BIGINT NOT NULL)"
            )
            con.execute(f"DELETE FROM {sink._meta_sql()} WHERE sink_id = ?", [sink.sink_id])


class _PostgresStore(_Store):
    dialect = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn = None

    def display(self) -> str:
        # Never print a password.
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return repr(parts._replace(netloc=netloc).geturl())
        return repr(self.url)

    def unconnected(self) -> _PostgresStore:
        return _PostgresStore(self.url)

    def _connect(self):
        import psycopg

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.url, autocommit=True)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @staticmethod
    def type_of(col: str, t: pa.DataType) -> str:
        simple = {
            pa.int8(): "SMALLINT",
            pa.int16(): "SMALLINT",
            pa.int32(): "INTEGER",
            pa.int64(): "BIGINT",
            pa.uint8(): "SMALLINT",
            pa.uint16(): "INTEGER",
            pa.uint32(): "BIGINT",
            pa.uint64(): "NUMERIC(20, 0)",
            pa.float16(): "REAL",
            pa.float32(): "REAL",
            pa.float64(): "DOUBLE PRECISION",
            pa.bool_(): "BOOLEAN",
            pa.string(): "TEXT",
            pa.large_string(): "TEXT",
            pa.binary(): "BYTEA",
            pa.large_binary(): "BYTEA",
            pa.date32(): "DATE",
            pa.date64(): "DATE",
        }
        if t in simple:
            return simple[t]
        if pa.types.is_timestamp(t):
            return "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
        if pa.types.is_decimal(t):
            return f"NUMERIC({t.precision}, {t.scale})"
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            inner = t.value_type
            if pa.types.is_list(inner) or pa.types.is_large_list(inner):
                raise TypeError(f"column {col!r}: nested lists have no PostgreSQL type")
            return _PostgresStore.type_of(col, inner) + "[]"
        raise TypeError(f"column {col!r}: no PostgreSQL type for Arrow type {t}")

    def _last(self, cur: Any, sink: CurrentResultsSink, lock: bool = False) -> int | None:
        cur.execute("SELECT to_regclass(%s)", [sink._meta_sql()])
        if cur.fetchone()[0] is None:
            return None
        cur.execute(
            f"SELECT batch_id FROM {sink._meta_sql()} WHERE sink_id = %s"
            + (" FOR UPDATE" if lock else ""),
            [sink.sink_id],
        )
        row = cur.fetchone()
        return None if row is None or row[0] < 0 else int(row[0])

    def last_batch_id(self, sink: CurrentResultsSink) -> int | None:
        with self._connect().cursor() as cur:
            return self._last(cur, sink)

    def apply(self, sink, layout, staged, batch_id) -> bool:
        conn = self._connect()
        stage = "__hw_stage"
        with conn.transaction(), conn.cursor() as cur:
            for ddl in sink._ddl(layout, self.type_of):
                cur.execute(ddl)
            # One writer per sink_id at a time: lock its row, then check the batch id.
            cur.execute(
                f"INSERT INTO {sink._meta_sql()} (sink_id, batch_id) VALUES (%s, -1) "
                f"ON CONFLICT (sink_id) DO NOTHING",
                [sink.sink_id],
            )
            last = self._last(cur, sink, lock=True)
            if last is not None and batch_id <= last:
                return False
            cols = list(staged.column_names)
            defs = [
                f"{_q(c)} {'BOOLEAN' if c == 'is_retraction' else self.type_of(c, layout.types[c])}"
                for c in cols
            ]
            cur.execute(f"CREATE TEMP TABLE {stage} ({', '.join(defs)}) ON COMMIT DROP")
            # Bulk load: one COPY stream, not a statement per row.
            with cur.copy(f"COPY {stage} ({', '.join(_q(c) for c in cols)}) FROM STDIN") as copy:
                for row in zip(*(col.to_pylist() for col in staged.columns), strict=True):
                    copy.write_row(row)
            delete, upsert = sink._apply_sql(layout, stage, batch_id)
            if pc.any(staged["is_retraction"]).as_py():
                cur.execute(delete)
            cur.execute(upsert)
            cur.execute(
                f"UPDATE {sink._meta_sql()} SET batch_id = %s WHERE sink_id = %s",
                [int(batch_id), sink.sink_id],
            )
        return True

    def read(self, sink):
        import pandas as pd

        with self._connect().cursor() as cur:
            cur.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = COALESCE(%s, current_schema()) AND table_name = %s "
                "ORDER BY ordinal_position",
                [sink._schema, sink._name],
            )
            columns = cur.fetchall()
            if not columns:
                return pd.DataFrame()
            cur.execute(_read_sql(sink, columns))
            rows = cur.fetchall()
        frame = pd.DataFrame(rows, columns=[c for c, _ in columns])
        return _order(frame, sink)

    def reset(self, sink) -> None:
        conn = self._connect()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {sink._table_sql()}")
            cur.execute("SELECT to_regclass(%s)", [sink._meta_sql()])
            if cur.fetchone()[0] is not None:
                cur.execute(f"DELETE FROM {sink._meta_sql()} WHERE sink_id = %s", [sink.sink_id])
