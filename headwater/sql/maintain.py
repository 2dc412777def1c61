"""Incremental maintenance of a query's result, one event-time group at a time.

The model groups a query's stream rows into event-time groups (windows, or
windows and keys) and fires them by the EMIT trigger; every column of the
rows travels in the group's state (one ``ToList`` per column). When groups
fire, :class:`GroupMaintainer` recomputes their result rows with DuckDB
(the query with its windowing TVFs bound to the group's window) and diffs
them against what was materialized last (:class:`Materializer`), which yields
the changelog. The same object runs inside the local runner and inside each
shard of the Spark streaming runner, whose state store keeps its snapshot;
``expire`` trims it to the windows the model still holds.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.model.schema import Field
from headwater.model.time import MIN_TIMESTAMP
from headwater.model.types import BOOLEAN, FLOAT64, INT64, STRING, DecimalType, of_arrow
from headwater.sql.changelog import GROUP_COLUMNS, Materializer
from headwater.sql.errors import SqlError
from headwater.sql.translate import GROUP_RELATION

#: Union input columns every stream row carries besides its own.
SOURCE, EVENT_TIME, KEY = "__src", "__et", "__key"
#: Version of the snapshot layout below.
SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class StreamLayout:
    """Where one stream's columns sit in the union input: ``union[i]`` holds
    ``columns[i]``; ``timestamps`` are carried as epoch ms."""

    name: str
    columns: tuple[str, ...]
    union: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    timestamps: frozenset[str]


_WINDOW = ["key", "window_start", "window_end"]
#: The epoch ms a pandas timestamp can hold.
_TS_MIN, _TS_MAX = pd.Timestamp.min.value // 1_000_000 + 1, pd.Timestamp.max.value // 1_000_000


def _groups(panes: pd.DataFrame) -> pd.DataFrame:
    """The event-time groups of panes, in the changelog's group columns."""
    return pd.DataFrame(
        {
            "__gk": panes["key"].astype(str).to_numpy(),
            "__gs": panes["window_start"].to_numpy(np.int64),
            "__ge": panes["window_end"].to_numpy(np.int64),
        }
    )


def _logical(t) -> object:
    """The logical type of a result column; DuckDB's decimals (and the HUGEINT of a
    SUM of integers) reach pandas as floats."""
    logical = of_arrow(t)
    return FLOAT64 if isinstance(logical, DecimalType) else logical


class GroupMaintainer:
    """The query's result per fired group, and its changelog (a pane transform)."""

    def __init__(
        self,
        text: str,
        streams: tuple[StreamLayout, ...],
        tables: dict[str, pd.DataFrame],
        name: str,
    ) -> None:
        self.text = text
        self.streams = streams
        self.tables = tables
        self.name = name
        self._con: duckdb.DuckDBPyConnection | None = None
        self.columns: list[str] = []
        self.types: dict[str, object] = {}
        relation = self._relation({s.name: self._frame(s, {}, 0) for s in streams}, 0, 0)
        self.columns = list(relation.columns)
        types = relation.arrow().schema.types
        self.types = {c: _logical(t) for c, t in zip(self.columns, types, strict=True)}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_con"] = None  # a connection does not travel; each process opens its own
        return state

    def output_fields(self) -> tuple[Field, ...]:
        """Columns of the changelog rows: group, the query's columns, the change."""
        group = (Field("__gk", STRING), Field("__gs", INT64), Field("__ge", INT64))
        own = tuple(Field(c, t) for c, t in self.types.items())
        change = (Field("undo", BOOLEAN), Field("ptime", INT64), Field("ver", INT64))
        return group + own + change

    # -- the pane-transform protocol: restore, apply, snapshot
    def restore(self, blob: bytes | None) -> Materializer:
        state = Materializer(self.columns)
        if blob:
            version, last, versions = pickle.loads(blob)
            if version != SNAPSHOT_VERSION:
                raise ValueError(f"SQL state of version {version}; this headwater reads 1")
            state.last, state.versions = last, versions
        return state

    def snapshot(self, state: Materializer) -> bytes:
        return pickle.dumps((SNAPSHOT_VERSION, state.last, state.versions))

    def expire(self, state: Materializer, settled: int) -> None:
        """Forget the groups of windows ending by ``settled`` (``Reducer.settled``), so
        that the state holds only the rows a pane may still name."""
        if settled > MIN_TIMESTAMP:
            state.expire(int(settled))

    def apply(self, panes: pd.DataFrame, now: int, state: Materializer) -> pd.DataFrame:
        """The changelog of the groups that fired in one step (their last pane
        each), and of the groups merged away (sessions): their rows are withdrawn."""
        if not len(panes):
            return state.apply(panes.iloc[:0].reindex(columns=list(GROUP_COLUMNS)), None, now)
        withdrawn = panes["is_retraction"].astype(bool).to_numpy()
        new = panes[~withdrawn].drop_duplicates(_WINDOW, keep="last")
        fired = _groups(new)
        parts = [self._group(new.iloc[i], *fired.iloc[i]) for i in range(len(new))]
        results = (
            pd.concat(parts, ignore_index=True)
            if parts
            else pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns])
        )
        # A retraction of a group that did not fire again is a window merged into
        # another one (a session bridged by later data): it no longer exists.
        gone = _groups(panes[withdrawn])
        return state.apply(pd.concat([fired, gone], ignore_index=True), results, now)

    # -- one group
    def _group(self, pane: pd.Series, key: str, start: int, end: int) -> pd.DataFrame:
        """The query over one group's rows (a per-group DuckDB call: groups are
        few per step; each one's rows are whole columns)."""
        source = np.asarray(pane[SOURCE], dtype=np.int64)
        frames = {s.name: self._frame(s, pane, source == i) for i, s in enumerate(self.streams)}
        out = self._evaluate(frames, start, end)
        out.insert(0, "__ge", end)
        out.insert(0, "__gs", start)
        out.insert(0, "__gk", key)
        return out

    def _frame(self, layout: StreamLayout, pane, mask) -> pa.Table:
        """One stream's rows of a group as an Arrow table of the stream's own types."""
        arrays = []
        columns = zip(layout.columns, layout.union, layout.types, strict=True)
        for column, union, arrow_type in columns:
            values = np.asarray(pane[union], dtype=object)[mask] if len(pane) else []
            if column in layout.timestamps:
                ms = pd.Series(values, dtype="float64")
                series = pd.to_datetime(ms, unit="ms")
            else:
                series = pd.Series(values, dtype=object)
            arrays.append(pa.array(series, type=arrow_type, from_pandas=True))
        return pa.Table.from_arrays(arrays, names=list(layout.columns))

    def _evaluate(self, frames: dict[str, pa.Table], start: int, end: int) -> pd.DataFrame:
        return self._relation(frames, start, end).df()

    def _relation(self, frames: dict[str, pa.Table], start: int, end: int):
        con = self._connection()
        for name, frame in frames.items():
            con.register(name, frame)
        # a global window's bounds (a keyed group) are out of a timestamp's range; no
        # query reads them (its TVFs, if any, are computed over the group's rows)
        start, end = (int(np.clip(b, _TS_MIN, _TS_MAX)) for b in (start, end))
        bounds = pd.DataFrame(
            {"__gs": pd.to_datetime([start], unit="ms"), "__ge": pd.to_datetime([end], unit="ms")}
        )
        con.register(GROUP_RELATION, bounds)
        try:
            return con.sql(self.text)
        except duckdb.Error as exc:
            raise SqlError(f"query {self.name}: {str(exc).splitlines()[0]}") from None

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = duckdb.connect()
            for name, frame in self.tables.items():
                self._con.register(name, frame)
        return self._con
