"""The current-results table: one row per window, kept up to date per micro-batch.

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

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.io.sinks.batches import panes_only, to_arrow
from headwater.io.sinks.stores import DuckDBStore, Layout, PostgresStore, Store, qid
from headwater.model import combiners as C
from headwater.model.panes import Accumulation
from headwater.model.schema import PANE_COLUMNS, WINDOW_COLUMNS

log = logging.getLogger(__name__)

#: Pane metadata stored in the table (a retraction is applied, not stored).
STORED_META = tuple(c for c in PANE_COLUMNS if c != "is_retraction")
#: Column of the current-results table naming the batch that wrote the row.
BATCH_COL = "batch_id"
#: Name of the metadata table (in the results table's schema): ``sink_id -> batch_id``.
META_TABLE = "headwater_sink_batches"
#: Merges supported for discarding panes (and the names accepted for them).
MERGES = {"sum": "sum", "add": "sum", "count": "sum", "min": "min", "max": "max"}


def qualified(table: str) -> tuple[str | None, str]:
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
            self._store: Store = DuckDBStore(target)
        elif backend in ("postgres", "postgresql"):
            self._store = PostgresStore(target)
        else:
            raise ValueError(f"backend must be 'duckdb' or 'postgres', got {backend!r}")
        self.target = target
        self.backend = self._store.dialect
        self.table = table
        self.sink_id = sink_id or table
        self._schema, self._name = qualified(table)

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
        self._layout: Layout | None = None

    # -- the sink -------------------------------------------------------------
    def held(self):
        """One connection to the store while a run of batches is written."""
        return self._store.held()

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
        table = to_arrow(panes_only(batch))
        if table.num_rows == 0:
            return False
        layout = self._layout_of(table)
        staged = self._reduce(table, layout)
        applied = self._store.apply(self, layout, staged, batch_id)
        if not applied:
            log.info("%r: batch %d already applied: skipped", self, batch_id)
        return applied

    # -- one row per window -----------------------------------------------------
    def _layout_of(self, table: pa.Table) -> Layout:
        names = list(table.column_names)
        for c in (*WINDOW_COLUMNS, "pane_index"):
            if c not in names:
                raise ValueError(f"not a batch of panes: no {c!r} column (columns: {names})")
        if self.key_cols is not None:
            keys = self.key_cols
        else:
            keys = tuple(names[: names.index("window_start")])
        if self.value_cols is not None:
            values = self.value_cols
        else:
            skip = {*keys, *WINDOW_COLUMNS, *PANE_COLUMNS, BATCH_COL}
            values = tuple(n for n in names if n not in skip)
        meta = tuple(m for m in STORED_META if m in names)
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
        layout = Layout(tuple(keys), tuple(values), meta, types)
        if self._layout is not None and self._layout.stored != layout.stored:
            raise ValueError(
                f"batch columns changed: {list(layout.stored)} != {list(self._layout.stored)}"
            )
        self._layout = layout
        return layout

    def _reduce(self, table: pa.Table, layout: Layout) -> pa.Table:
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
        return qid(self._name) if self._schema is None else f"{qid(self._schema)}.{qid(self._name)}"

    def _meta_sql(self) -> str:
        name = qid(META_TABLE)
        return name if self._schema is None else f"{qid(self._schema)}.{name}"

    def _ddl(self, layout: Layout, type_of: Callable[[str, pa.DataType], str]) -> list[str]:
        cols = [f"{qid(c)} {type_of(c, layout.types[c])}" for c in layout.stored]
        cols.append(f"{qid(BATCH_COL)} BIGINT NOT NULL")
        pk = ", ".join(qid(c) for c in layout.primary_key)
        out = []
        if self._schema is not None:
            out.append(f"CREATE SCHEMA IF NOT EXISTS {qid(self._schema)}")
        out.append(
            f"CREATE TABLE IF NOT EXISTS {self._table_sql()} ({', '.join(cols)}, "
            f"PRIMARY KEY ({pk}))"
        )
        out.append(
            f"CREATE TABLE IF NOT EXISTS {self._meta_sql()} (sink_id VARCHAR PRIMARY KEY, "
            f"batch_id BIGINT NOT NULL)"
        )
        return out

    def _source_expr(self, layout: Layout, col: str) -> str:
        expr = f"s.{qid(col)}"
        t = layout.types[col]
        if col in layout.windows and pa.types.is_timestamp(t):
            inf = "-infinity" if col == "window_start" else "infinity"
            sql_type = "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
            expr = f"COALESCE({expr}, '{inf}'::{sql_type})"
        return expr

    def _apply_sql(self, layout: Layout, staged: pa.Table, stage: str, batch_id: int) -> list[str]:
        """Withdraw retracted windows (if the batch has retractions), then upsert the
        new panes."""
        target = self._table_sql()
        match = " AND ".join(
            f"t.{qid(c)} = {self._source_expr(layout, c)}" for c in layout.primary_key
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
            old, new = f"t.{qid(c)}", f"excluded.{qid(c)}"
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
            sets.append(f"{qid(c)} = {value}")
        newer = ">" if self.merge is not None else ">="
        upsert = (
            f"INSERT INTO {target} AS t ({', '.join(qid(c) for c in cols)}) "
            f"SELECT {', '.join(exprs)} FROM {stage} AS s WHERE NOT s.is_retraction "
            f"ON CONFLICT ({', '.join(qid(c) for c in layout.primary_key)}) DO UPDATE SET "
            f"{', '.join(sets)} WHERE excluded.pane_index {newer} t.pane_index"
        )
        return [delete, upsert] if pc.any(staged["is_retraction"]).as_py() else [upsert]


#: How a current-results table merges the DISCARDING panes of a combiner, by class:
#: a pane holds only what is new, so the stored value and the pane combine.
DISCARDING_MERGES: dict[type, str] = {C.Sum: "sum", C.Count: "sum", C.Min: "min", C.Max: "max"}


def _merge_of(name: str, fn: Any) -> str:
    merge = DISCARDING_MERGES.get(type(fn))
    if merge is None:
        raise ValueError(
            f"aggregation {name!r} ({fn!r}): DISCARDING panes can only be combined in a "
            f"current-results table for sum, count, min and max (the pane outputs of other "
            f"combiners do not merge); use accumulation='accumulating' or 'retracting'"
        )
    return merge


def duckdb_results(path: str | os.PathLike, **kwargs: Any) -> CurrentResultsSink:
    """A :class:`CurrentResultsSink` in the DuckDB database file ``path``."""
    return CurrentResultsSink(path, backend="duckdb", **kwargs)


def postgres_results(url: str, **kwargs: Any) -> CurrentResultsSink:
    """A :class:`CurrentResultsSink` in the PostgreSQL database at ``url``."""
    return CurrentResultsSink(url, backend="postgres", **kwargs)
