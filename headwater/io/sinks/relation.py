"""The current table of a changelog: a SQL query's result, kept up to date.

A changelog (headwater SQL's ``EMIT STREAM`` rows: the query's columns, then
``undo``, ``ptime``, ``ver``) is applied batch by batch: a row adds one copy
of itself, an ``undo`` row withdraws one. A relation may hold equal rows, so
the table keeps one row per distinct row with its multiplicity ``__n``, under
a primary key ``__row`` (a 64-bit hash of the row's values): each batch is
netted per row in pandas (vectorized), staged in bulk, then ONE upsert
(``__n = __n + batch``) and ONE delete of the rows whose count fell to zero,
in one transaction with the batch id (DuckDB by default, PostgreSQL by URL,
the stores of :mod:`headwater.io.sinks.stores`). A batch already applied is
skipped, so a re-run batch (a restart) counts nothing twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.io.sinks.batches import to_arrow
from headwater.io.sinks.results import BATCH_COL, META_TABLE, qualified
from headwater.io.sinks.stores import DuckDBStore, PostgresStore, Store, qid

log = logging.getLogger(__name__)

#: Changelog columns that describe the change, not the row.
CHANGE_COLUMNS = ("undo", "ptime", "ver")
ROW, COUNT = "__row", "__n"


def nullable_dtype(arrow_type: pa.DataType) -> Any:
    """Integers and booleans as pandas' nullable types, with or without a null in
    the batch: otherwise a batch with a NULL reads an integer column as floats
    (and booleans as objects), whose rows hash apart from the same rows of a batch
    without one, so that a row added in one batch was not withdrawn by another.
    Their values hash as the plain types' do, so stored rows keep their keys."""
    return _NULLABLE.get(arrow_type)


_NULLABLE = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(),
    pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(),
    pa.uint64(): pd.UInt64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


@dataclass(frozen=True)
class _Columns:
    """The table's columns: the relation's own, with their Arrow types."""

    values: tuple[str, ...]
    types: dict[str, pa.DataType]

    @property
    def stored(self) -> tuple[str, ...]:
        return (ROW, *self.values, COUNT)


class RelationSink:
    """Applies changelog batches to a table holding the relation's current rows.

    ``target``: a DuckDB file (``":memory:"`` for a process-local one) or a
    PostgreSQL URL; ``table``: ``name`` or ``schema.name``, created on the first
    non-empty batch; ``sink_id``: this writer in the batch-id table.
    """

    #: It takes a batch as an Arrow table as well: a runner that holds the batch as
    #: Arrow (the stateless Spark path) hands it over without a trip through Spark.
    takes_arrow = True

    def __init__(
        self, target: str | os.PathLike, *, table: str = "current_relation", sink_id=None
    ) -> None:
        target = os.fspath(target)
        is_pg = target.startswith(("postgresql://", "postgres://"))
        self._store: Store = PostgresStore(target) if is_pg else DuckDBStore(target)
        self.target, self.table = target, table
        self.sink_id = sink_id or table
        self.key_cols = (ROW,)
        self._schema, self._name = qualified(table)

    def held(self):
        """One connection to the store while a run of batches is written."""
        return self._store.held()

    def __call__(self, batch: Any, batch_id: int) -> None:
        self.write(batch, batch_id)

    def write(self, batch: Any, batch_id: int) -> bool:
        """Apply one changelog batch; False if it was empty or already applied."""
        return self.write_run([(batch, batch_id)])

    def write_run(self, batches: Sequence[tuple[Any, int]]) -> bool:
        """Apply a run of batches written in one call (ids increasing) as one: those
        after the last applied, netted together, in one transaction that records the
        last id. The table after is the one batch by batch leaves (a row's count only
        sums), and no reader sees it between the batches anyway (the run holds the
        file: :meth:`held`). False if nothing was left to apply. One connection for
        the call (the last id read, then the batch applied): opening a DuckDB file
        twice per micro-batch was a tenth of a small batch's time on Spark."""
        with self._store.held():
            return self._write_run(batches)

    def _write_run(self, batches: Sequence[tuple[Any, int]]) -> bool:
        last = self._store.last_batch_id(self)
        if last is not None and batches and int(batches[0][1]) <= last:
            log.info("%r: batches up to %d already applied: skipped", self, last)
        fresh = [(to_arrow(b), int(i)) for b, i in batches if last is None or int(i) > last]
        fresh = [(t, i) for t, i in fresh if t.num_rows]
        if not fresh:
            return False
        joined = pa.concat_tables([t for t, _ in fresh], promote_options="default")
        staged, columns = self._net(joined)
        return self._store.apply(self, columns, staged, fresh[-1][1])

    def _net(self, batch: pa.Table) -> tuple[pa.Table, _Columns]:
        """One row per distinct row of the batch with its net count (+ adds, - undos),
        in the batch's own column types."""
        frame = batch.to_pandas(types_mapper=nullable_dtype)
        values = [c for c in frame.columns if c not in CHANGE_COLUMNS]
        sign = np.where(frame["undo"].astype(bool).to_numpy(), -1, 1)
        rows = frame[values].copy()
        rows[ROW] = pd.util.hash_pandas_object(rows, index=False).to_numpy().view(np.int64)
        rows[COUNT] = sign
        net = rows.groupby(ROW, sort=False, dropna=False).agg(
            {**{v: "first" for v in values}, COUNT: "sum"}
        )
        net = net[net[COUNT] != 0].reset_index()[[ROW, *values, COUNT]]
        fields = [pa.field(ROW, pa.int64()), *(batch.schema.field(v) for v in values)]
        schema = pa.schema([*fields, pa.field(COUNT, pa.int64())])
        table = pa.Table.from_pandas(net, schema=schema, preserve_index=False)
        types = {name: table.schema.field(name).type for name in table.column_names}
        return table, _Columns(tuple(values), types)

    # -- what the stores call
    def _table_sql(self) -> str:
        return qid(self._name) if self._schema is None else f"{qid(self._schema)}.{qid(self._name)}"

    def _meta_sql(self) -> str:
        name = qid(META_TABLE)
        return name if self._schema is None else f"{qid(self._schema)}.{name}"

    def _ddl(self, columns: _Columns, type_of: Callable[[str, pa.DataType], str]) -> list[str]:
        defs = [f"{qid(c)} {type_of(c, columns.types[c])}" for c in columns.stored]
        defs.append(f"{qid(BATCH_COL)} BIGINT NOT NULL")
        out = [f"CREATE SCHEMA IF NOT EXISTS {qid(self._schema)}"] if self._schema else []
        out.append(
            f"CREATE TABLE IF NOT EXISTS {self._table_sql()} ({', '.join(defs)}, "
            f"PRIMARY KEY ({qid(ROW)}))"
        )
        out.append(
            f"CREATE TABLE IF NOT EXISTS {self._meta_sql()} (sink_id VARCHAR PRIMARY KEY, "
            f"batch_id BIGINT NOT NULL)"
        )
        return out

    def _apply_sql(self, columns: _Columns, staged, stage: str, batch_id: int) -> list[str]:
        cols = [*columns.stored, BATCH_COL]
        exprs = [f"s.{qid(c)}" for c in columns.stored] + [str(int(batch_id))]
        upsert = (
            f"INSERT INTO {self._table_sql()} AS t ({', '.join(qid(c) for c in cols)}) "
            f"SELECT {', '.join(exprs)} FROM {stage} AS s ON CONFLICT ({qid(ROW)}) DO UPDATE SET "
            f"{qid(COUNT)} = t.{qid(COUNT)} + excluded.{qid(COUNT)}, "
            f"{qid(BATCH_COL)} = excluded.{qid(BATCH_COL)}"
        )
        delete = f"DELETE FROM {self._table_sql()} WHERE {qid(COUNT)} <= 0"
        return [upsert, delete]

    # -- reading
    def read(self) -> pd.DataFrame:
        """The relation: every row as many times as it is held, without bookkeeping."""
        frame = self._store.read(self)
        if not len(frame):
            return frame
        counts = frame[COUNT].to_numpy(np.int64)
        frame = frame.loc[frame.index.repeat(counts)]
        return frame.drop(columns=[ROW, COUNT, BATCH_COL]).reset_index(drop=True)

    def last_batch_id(self) -> int | None:
        return self._store.last_batch_id(self)

    def reset(self) -> None:
        self._store.reset(self)

    def close(self) -> None:
        self._store.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_store"] = self._store.unconnected()
        return state

    def __repr__(self) -> str:
        return f"RelationSink({self._store.display()}, table={self.table!r})"
