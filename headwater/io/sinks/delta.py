"""A Delta Lake table equal to a result's table view, one MERGE per micro-batch.

:class:`DeltaSink` is a ``sink(batch, batch_id)`` (``foreachBatch``) that
keeps a Delta table at ``path`` equal to the table view of a changelog:

* pane batches (a pipeline's panes, as for
  :class:`~headwater.io.sinks.CurrentResultsSink`): one row per ``(key columns,
  window_start, window_end)``; per window the batch's last row decides (rows
  ordered by ``pane_index``, a pane before its retraction): a pane is upserted
  (never over a later pane), a retraction deletes the window's row.
  Accumulating or retracting panes only: discarding panes are refused.
* SQL changelog batches (``EMIT STREAM`` rows: the query's columns, then
  ``undo``, ``ptime``, ``ver``): with ``key=`` the last change per key decides
  (an ``undo`` last deletes the key's row); without it the table holds the
  relation as a multiset, one row per distinct row with its count ``__n``
  (as :class:`~headwater.io.sinks.relation.RelationSink` does).

Each batch is reduced in Arrow (vectorized) and applied as ONE Delta MERGE,
one commit that also records the batch id as the Delta app transaction
``(sink_id, batch_id)`` (Delta's ``txn`` action, the one Spark's Delta writer
uses for ``txnAppId``/``txnVersion``). A batch id up to the recorded one is
skipped, so a replayed batch changes nothing: not the rows, not the version.

Written with ``deltalake`` (delta-rs, the ``delta`` extra): no JVM connector
is needed, so it runs the same from the local runner and from Spark's
``foreachBatch`` (the batch is collected to the driver as Arrow). Spark reads
the table with Delta's own connector (``io.delta:delta-spark_2.13``
:data:`DELTA_SPARK_VERSION`, built against Spark 4.2): ``scripts/kafka.sh
delta-jars`` resolves its jars once, :func:`cached_delta_jars` lists them for
``spark.jars``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from headwater.io.sinks.batches import panes_only, to_arrow
from headwater.model.panes import Accumulation
from headwater.model.schema import WINDOW_COLUMNS

log = logging.getLogger(__name__)

#: Delta Lake's Spark connector for the pinned PySpark 4.2.0 (Delta 4.4.0 is built
#: against Spark 4.2.0).
DELTA_SPARK_VERSION = "4.4.0"
#: The session settings Delta's Spark connector needs (with its jars) to read a table.
DELTA_SPARK_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Changelog columns that describe the change, not the row.
CHANGE_COLUMNS = ("undo", "ptime", "ver")
ROW, COUNT, DELETE, POS = "__row", "__n", "__hw_delete", "__hw_pos"


@dataclass(frozen=True)
class StagedBatch:
    """One micro-batch as its MERGE applies it: ``rows`` (one per ``on`` key, with
    the :data:`DELETE` flag; timestamps in microseconds), matched on ``on`` (null
    equal to null); ``guard``: ``pane_index`` (a row never replaces a later pane),
    :data:`COUNT` (a multiset: counts add up, a row at count 0 goes) or None (the
    last change per key decides)."""

    rows: pa.Table
    on: tuple[str, ...]
    guard: str | None

    @property
    def columns(self) -> list[str]:
        """The table's columns (all but the delete flag)."""
        return [c for c in self.rows.column_names if c != DELETE]


class DeltaSink:
    """Keeps the Delta table at ``path`` equal to a changelog's table view.

    ``key``: the result's key columns (for panes: the group key, the window
    bounds are added; default: the columns before ``window_start``, or the
    pipeline's key with ``aggregation=``; for a SQL changelog: the columns that
    identify a row, default none: a multiset table). ``sink_id``: this writer's
    Delta app id (default ``headwater:<path>``). ``storage_options``: passed to
    ``deltalake`` (object stores). Each MERGE reads only the target files
    whose statistics overlap the batch's range of each ordered match column
    (:func:`target_bounds`): a batch of new windows rewrites and reads no old file.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        key: Sequence[str] | None = None,
        aggregation: Any = None,
        sink_id: str | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        if aggregation is not None:
            strategy = aggregation.strategy
            if strategy.accumulation == Accumulation.DISCARDING:
                raise ValueError(
                    "a Delta table view follows ACCUMULATING or RETRACTING panes: a "
                    "discarding pane holds only what is new; use accumulation='retracting'"
                )
            if key is None:
                key = aggregation.key_cols
        self.key = None if key is None else tuple(key)
        self.sink_id = sink_id or f"headwater:{self.path}"
        self.storage_options = storage_options
        #: delta-rs's metrics of this sink's last MERGE (rows written, target files
        #: scanned and skipped), None before the first.
        self.last_merge: dict[str, Any] | None = None

    #: One action (``toArrow``) reads each batch: the runner need not persist it.
    reads_batch_once = True

    def __call__(self, batch: Any, batch_id: int) -> None:
        self.write(batch, batch_id)

    # -- the sink ---------------------------------------------------------------
    def write(self, batch: Any, batch_id: int) -> bool:
        """Apply one batch as one MERGE; False if empty or already applied."""
        staged = self.stage(batch)
        return False if staged is None else self.apply(staged, batch_id)

    def applied(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` (or a later one) is already in the table."""
        return self._done(self._table(), int(batch_id))

    def _done(self, dt: Any, batch_id: int) -> bool:
        last = None if dt is None else dt.transaction_version(self.sink_id)
        if last is not None and batch_id <= last:
            log.info("%r: batch %d already applied (last %d): skipped", self, batch_id, last)
            return True
        return False

    def apply(self, staged: StagedBatch, batch_id: int) -> bool:
        """Apply a staged batch as one MERGE; False if it was already applied. The
        table's log is read once for both (the check and the MERGE)."""
        dt = self._table()
        if self._done(dt, int(batch_id)):
            return False
        self._merge(dt, staged, int(batch_id))
        return True

    def stage(self, batch: Any) -> StagedBatch | None:
        """The batch reduced to what its MERGE applies (None if it has no rows)."""
        table = to_arrow(panes_only(batch))
        if table.num_rows == 0:
            return None
        if "undo" in table.column_names:
            rows, on, guard = self._changelog(table)
        else:
            rows, on, guard = self._panes(table), self._pane_key(table), "pane_index"
        return StagedBatch(_micros(rows), tuple(on), guard)

    def _pane_key(self, table: pa.Table) -> tuple[str, ...]:
        names = table.column_names
        for c in (*WINDOW_COLUMNS, "pane_index"):
            if c not in names:
                raise ValueError(f"not a batch of panes: no {c!r} column (columns: {names})")
        keys = self.key if self.key is not None else names[: names.index("window_start")]
        return (*keys, *WINDOW_COLUMNS)

    def _panes(self, table: pa.Table) -> pa.Table:
        """One row per window: its last pane, or a delete if that is a retraction."""
        key = self._pane_key(table)
        if "is_retraction" in table.column_names:
            retracting = pc.fill_null(table["is_retraction"], False)
            table = table.drop_columns(["is_retraction"])
        else:
            retracting = pa.array(np.zeros(table.num_rows, dtype=bool))
        table = table.append_column(DELETE, retracting)
        order = pc.sort_indices(
            table, sort_keys=[("pane_index", "ascending"), (DELETE, "ascending")]
        )
        return _last_per(table.take(order), key)

    def _changelog(self, table: pa.Table) -> tuple[pa.Table, tuple[str, ...], str | None]:
        """The batch's net change per key (``key=``) or per distinct row (multiset)."""
        values = [c for c in table.column_names if c not in CHANGE_COLUMNS]
        undo = pc.fill_null(table["undo"], False)
        if self.key is not None:
            missing = [k for k in self.key if k not in values]
            if missing:
                raise ValueError(f"key columns {missing} not in the changelog ({values})")
            rows = table.select(values).append_column(DELETE, undo)
            return _last_per(rows, self.key), self.key, None
        frame = table.select(values).to_pandas()
        frame[ROW] = pd.util.hash_pandas_object(frame, index=False).to_numpy().view(np.int64)
        frame[COUNT] = np.where(undo.to_numpy(zero_copy_only=False), -1, 1)
        net = frame.groupby(ROW, sort=False, dropna=False).agg(
            {**{v: "first" for v in values}, COUNT: "sum"}
        )
        net = net[net[COUNT] != 0].reset_index()[[ROW, *values, COUNT]]
        net[DELETE] = False
        return pa.Table.from_pandas(net, preserve_index=False), (ROW,), COUNT

    # -- Delta --------------------------------------------------------------------
    def _table(self):
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path, storage_options=self.storage_options):
            return None
        return DeltaTable(self.path, storage_options=self.storage_options)

    def _merge(self, dt: Any, batch: StagedBatch, batch_id: int):
        from deltalake import CommitProperties, DeltaTable, Transaction

        staged, on, guard = batch.rows, batch.on, batch.guard
        columns = batch.columns
        if dt is None:
            schema = staged.select(columns).schema
            dt = DeltaTable.create(self.path, schema=schema, storage_options=self.storage_options)
        commit = CommitProperties(app_transactions=[Transaction(self.sink_id, batch_id)])
        match = [f"(t.{_q(k)} IS NOT DISTINCT FROM s.{_q(k)})" for k in on]
        predicate = " AND ".join([*target_bounds(staged, on), *match])
        merger = dt.merge(
            staged, predicate, source_alias="s", target_alias="t", commit_properties=commit
        )
        gone = f"(s.{_q(DELETE)})"
        if guard == COUNT:  # multiset: add the net count, drop rows whose count fell to 0
            total = f"t.{_q(COUNT)} + s.{_q(COUNT)}"
            merger = merger.when_matched_delete(f"({total}) <= 0").when_matched_update(
                {COUNT: total}
            )
            merger = merger.when_not_matched_insert({c: f"s.{_q(c)}" for c in columns})
        else:
            later = "" if guard is None else f" AND (s.{_q(guard)} >= t.{_q(guard)})"
            merger = merger.when_matched_delete(gone + later).when_matched_update(
                {c: f"s.{_q(c)}" for c in columns}, predicate=f"(NOT {gone}){later}"
            )
            merger = merger.when_not_matched_insert(
                {c: f"s.{_q(c)}" for c in columns}, predicate=f"(NOT {gone})"
            )
        self.last_merge = merger.execute()

    # -- reading ------------------------------------------------------------------
    def last_batch_id(self) -> int | None:
        """The last batch id applied (the Delta app transaction of ``sink_id``)."""
        dt = self._table()
        return None if dt is None else dt.transaction_version(self.sink_id)

    def version(self) -> int | None:
        dt = self._table()
        return None if dt is None else dt.version()

    def read(self) -> pd.DataFrame:
        """The table view (a multiset table's rows repeated ``__n`` times)."""
        dt = self._table()
        if dt is None:
            return pd.DataFrame()
        frame = dt.to_pyarrow_table().to_pandas()
        if ROW in frame.columns:
            frame = frame.loc[frame.index.repeat(frame[COUNT].to_numpy(np.int64))]
            frame = frame.drop(columns=[ROW, COUNT]).reset_index(drop=True)
        return frame

    def __repr__(self) -> str:
        return f"DeltaSink({self.path!r}, key={self.key!r})"


def cached_delta_jars() -> str | None:
    """Delta's Spark connector jars as a ``spark.jars`` value when ``scripts/kafka.sh
    delta-jars`` has resolved them (into ``$HEADWATER_CACHE``), else None."""
    cache = os.environ.get("HEADWATER_CACHE") or os.path.expanduser("~/.cache/headwater")
    cached = Path(cache) / f"delta-spark-{DELTA_SPARK_VERSION}"
    if not (cached / ".complete").exists():
        return None
    return ",".join(sorted(str(p) for p in cached.glob("*.jar")))


def target_bounds(staged: pa.Table, on: Sequence[str], quote=None) -> list[str]:
    """Literal ranges of the target rows a MERGE can match: for each match column
    of an ordered type (timestamp, date, integer) without nulls in the batch, its
    batch minimum to maximum. A matching target row has one of the batch's values,
    so the ranges change nothing; they let delta-rs skip the files whose column
    statistics lie outside (a batch of new windows reads none of the old ones),
    so a MERGE costs what its batch touches, not the whole table. ``quote``: the
    SQL dialect's identifier quoting (default DataFusion's)."""
    quote = quote or _q
    bounds = []
    for k in on:
        column = staged[k]
        kind = column.type
        ordered = pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_integer(kind)
        if k == ROW or not ordered or column.null_count or len(column) == 0:
            continue
        try:
            lo, hi = (_literal(v.as_py()) for v in pc.min_max(column).values())
        except (ValueError, OverflowError):  # beyond Python's dates: no range
            continue
        bounds += [f"(t.{quote(k)} >= {lo})", f"(t.{quote(k)} <= {hi})"]
    return bounds


def _literal(value: Any) -> str:
    """A SQL literal of an integer, date or timestamp (ISO text, with its offset
    when it has a time zone; DataFusion casts it to the column's type)."""
    if isinstance(value, int):
        return str(value)
    return f"'{value.isoformat()}'"


def _last_per(table: pa.Table, key: Sequence[str]) -> pa.Table:
    """The last row of each key (table order), in Arrow."""
    table = table.append_column(POS, pa.array(np.arange(table.num_rows)))
    grouped = table.group_by(list(key), use_threads=False).aggregate([(POS, "max")])
    return table.take(grouped[f"{POS}_max"]).drop_columns([POS])


def _micros(table: pa.Table) -> pa.Table:
    """Timestamps in microseconds, Delta's unit (nanoseconds need a reader feature
    few readers have); whole microseconds are exact, a finer time is refused."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            to = pa.timestamp("us", tz=field.type.tz)
            table = table.set_column(i, field.name, table[i].cast(to, safe=True))
    return table


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
