"""Incremental maintenance of a query's result, one event-time group at a time.

The model groups a query's stream rows into event-time groups (windows, or
windows and keys) and fires them by the EMIT trigger; every column of the
rows travels in the group's state (one ``RowValues`` per column). When groups
fire, :class:`GroupMaintainer` recomputes their result rows with DuckDB
(the query with its windowing TVFs bound to the group's window) and diffs
them against what was materialized last (:class:`Materializer`), which yields
the changelog. All groups that fire in a step are evaluated by one DuckDB query
over their rows together (:mod:`headwater.sql.maintain.batch`), or, for a query the
batched form does not cover, one query per group. The same object runs inside
the local runner and inside each shard of the Spark streaming runner, whose
state store keeps its snapshot; ``expire`` trims it to the windows the model
still holds.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.model.lists import flat_lists
from headwater.model.schema import Field
from headwater.model.time import GLOBAL_WINDOW_END, MIN_TIMESTAMP
from headwater.model.types import BOOLEAN, FLOAT64, INT64, STRING, DecimalType, of_arrow
from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError
from headwater.sql.maintain.append import append_why_not
from headwater.sql.maintain.batch import GID, BatchQuery, plan_batch
from headwater.sql.maintain.changelog import GROUP_COLUMNS, Materializer, RowCounts
from headwater.sql.plan.functions import ScalarFunction, function_error, register_duckdb
from headwater.sql.plan.stamps import micros_array
from headwater.sql.plan.translate import GROUP_RELATION

#: Union input columns every stream row carries besides its own.
SOURCE, EVENT_TIME, KEY = "__src", "__et", "__key"
#: Version of the snapshot layout below.
SNAPSHOT_VERSION = 2
#: the snapshot versions :meth:`GroupMaintainer.restore` reads
_READABLE = (1, 2)
#: The one group of a query maintained as one group (no key: every row in the
#: global window of one key), as the changelog's group columns name it.
ONE_GROUP = ("0", MIN_TIMESTAMP, GLOBAL_WINDOW_END)


@dataclass(frozen=True)
class StreamLayout:
    """Where one stream's columns sit in the union input: ``union[i]`` holds
    ``columns[i]``; ``timestamps`` are carried as epoch µs
    (:mod:`headwater.sql.plan.stamps`)."""

    name: str
    columns: tuple[str, ...]
    union: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    timestamps: frozenset[str]

    def reading(self, read: frozenset[str]) -> StreamLayout:
        """This layout with only the columns in ``read``: what the groups keep and
        evaluate (the union input and its dead letters keep them all)."""
        kept = [i for i, c in enumerate(self.columns) if c in read]
        return StreamLayout(
            name=self.name,
            columns=tuple(self.columns[i] for i in kept),
            union=tuple(self.union[i] for i in kept),
            types=tuple(self.types[i] for i in kept),
            timestamps=self.timestamps & read,
        )


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


def _texts(keys: np.ndarray) -> np.ndarray:
    """Pane keys as the groups spell them (:func:`_groups`): a runner's key of the
    one group may be a number."""
    return pd.Series(keys, dtype=object).astype(str).to_numpy(object)


def _column(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """A stream column as Arrow: numbers and booleans straight from numpy (an
    integral float to an integer type, NaN as NULL); objects, or numbers Arrow
    would not take as they are, value by value."""
    if values.dtype != object:
        try:
            return pa.array(values, type=arrow_type, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
            pass
    return pa.array(pd.Series(values, dtype=object), type=arrow_type, from_pandas=True)


#: DuckDB's wider types of SQL results, as SQL types them: a SUM of integers is
#: HUGEINT in DuckDB, BIGINT in SQL (and Spark).
_SQL_TYPES = {"HUGEINT": "BIGINT", "UHUGEINT": "BIGINT"}


def sql_typed(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``relation`` with SQL's result types (SUM of BIGINT is BIGINT, not HUGEINT),
    the same on every runner; an overflow is DuckDB's conversion error."""
    types = [str(t) for t in relation.types]
    if not any(t in _SQL_TYPES for t in types):
        return relation
    items = []
    for column, kind in zip(relation.columns, types, strict=True):
        quoted = '"' + column.replace('"', '""') + '"'
        target = _SQL_TYPES.get(kind)
        items.append(f"CAST({quoted} AS {target}) AS {quoted}" if target else quoted)
    return relation.project(", ".join(items))


def logical_type(t) -> object:
    """The logical type of a result column (see :func:`sql_typed`); DuckDB's
    decimals reach pandas as floats."""
    logical = of_arrow(t)
    return FLOAT64 if isinstance(logical, DecimalType) else logical


class GroupMaintainer:
    """The query's result per fired group, and its changelog (a pane transform).

    ``batched``: evaluate the groups of a step by one query when the query's
    shape allows (:attr:`batch` holds the batched query or why not); False
    evaluates every group by its own query (the benchmarks' baseline).
    ``functions``: the user functions the query calls. ``one_group``: the query
    is maintained as :data:`ONE_GROUP` (its key is none), which exists before
    any row: its result over no rows (a global aggregate's one row of
    ``COUNT(*) = 0``) is the query's first version (:meth:`begin`).
    ``expiring``: the keys' state has a time-to-live (their rows are withdrawn
    in the order they were evaluated in, so each step evaluates all of them).

    :attr:`append` is None when a step's changes are only the new rows of its
    groups' linear terms (:mod:`headwater.sql.maintain.append`), else why not."""

    def __init__(
        self,
        text: str,
        streams: tuple[StreamLayout, ...],
        tables: dict[str, pd.DataFrame],
        name: str,
        batched: bool = True,
        functions: tuple[ScalarFunction, ...] = (),
        one_group: bool = False,
        expiring: bool = False,
    ) -> None:
        self.text = text
        self.streams = streams
        self.tables = tables
        self.name = name
        self.functions = functions
        self._con: duckdb.DuckDBPyConnection | None = None
        self.columns: list[str] = []
        self.types: dict[str, object] = {}
        empty = {s.name: self._frame(s, {}, 0) for s in streams}
        relation = self._relation(self.text, empty, np.zeros(1), np.zeros(1))
        self.columns = list(relation.columns)
        self.schema = relation.arrow().schema
        self.types = {
            c: logical_type(t) for c, t in zip(self.columns, self.schema.types, strict=True)
        }
        #: the one group's result over no rows (None: the query has many groups, and
        #: a group exists only once a row of it arrives)
        self.initial = self._over_nothing(relation) if one_group else None
        self.batch: BatchQuery | str = "per-group evaluation was asked for"
        if batched:
            self.batch = self._checked(plan_batch(text, [s.name for s in streams]), empty)
        self.append = self._append_why_not(expiring)

    def _append_why_not(self, expiring: bool) -> str | None:
        """Why a step's changes are not the rows of the linear terms (None: they are)."""
        if not isinstance(self.batch, BatchQuery):
            return "its groups are evaluated one by one"
        if expiring:
            return "its keys' state expires (withdrawn in the order of a full evaluation)"
        if self.initial is not None and len(self.initial):
            return "its result over no rows is not empty"
        if any(pa.types.is_nested(t) for t in self.schema.types):
            return "a result column holds lists, structs or maps (compared as a whole)"
        return append_why_not(self.text, [s.name for s in self.streams])

    def _checked(self, batch: BatchQuery | str, empty: dict[str, pa.Table]) -> BatchQuery | str:
        """``batch`` if DuckDB binds it to the query's columns and types, then ``__gid``."""
        if isinstance(batch, str):
            return batch
        frames = {n: f.append_column(GID, pa.array([], pa.int64())) for n, f in empty.items()}
        try:
            schema = self._relation(batch.text, frames, np.zeros(0), np.zeros(0)).arrow().schema
        except SqlError as exc:
            return f"DuckDB does not bind its batched form ({exc})"
        if schema.names != [*self.columns, GID] or schema.types[:-1] != self.schema.types:
            return "its batched form has other columns or types than the query"
        return batch

    def _over_nothing(self, relation: duckdb.DuckDBPyRelation) -> pd.DataFrame:
        """The query evaluated over empty streams (whatever DuckDB gives: one row of
        a global aggregate, none under a HAVING it fails), as :data:`ONE_GROUP`'s rows."""
        out = self._df(relation)
        for i, (column, value) in enumerate(zip(GROUP_COLUMNS, ONE_GROUP, strict=True)):
            out.insert(i, column, value)
        return out

    def begin(self, now: int) -> pd.DataFrame:
        """The changelog of the query's start, at processing time ``now``: the one
        group's rows over no rows (nothing for a query of many groups). Emitted
        once per query; :meth:`restore` starts a new state with these rows
        materialized, so the group's first firing withdraws them."""
        state = Materializer(self.columns)
        if self.initial is None:
            return state.apply(pd.DataFrame(columns=list(GROUP_COLUMNS)), None, now)
        return state.apply(self.initial[list(GROUP_COLUMNS)], self.initial, now)

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
        if self.initial is not None and not blob:  # the first version (see begin)
            state.apply(self.initial[list(GROUP_COLUMNS)], self.initial, MIN_TIMESTAMP)
        if self.append is None and not blob:
            state.seen = RowCounts()  # the rows evaluated per group: none yet
        if blob:
            version, *kept = pickle.loads(blob)
            if version not in _READABLE:
                readable = ", ".join(map(str, _READABLE))
                raise ValueError(f"SQL state of version {version}; this headwater reads {readable}")
            state.last, state.versions = kept[0], kept[1]
            # version 1 kept no counts: a state restored from it evaluates in full
            counted = kept[2] if version >= 2 else None
            if self.append is None and counted is not None:
                state.seen = RowCounts(counted)
        return state

    def snapshot(self, state: Materializer) -> bytes:
        """The rows, versions and (append path) counts of every group: a restored
        state (a Spark micro-batch) takes the append path where the first did."""
        counted = None if state.seen is None else state.seen.groups
        return pickle.dumps((SNAPSHOT_VERSION, state.last, state.versions, counted))

    def expire(self, state: Materializer, settled: int) -> None:
        """Forget the groups of windows ending by ``settled`` (``Reducer.settled``), so
        that the state holds only the rows a pane may still name."""
        if settled > MIN_TIMESTAMP:
            state.expire(int(settled))

    def forget(self, state: Materializer, keys: np.ndarray, now: int) -> pd.DataFrame:
        """The changelog withdrawing the results of the groups of ``keys`` (their
        state expired at ``now``), which are then forgotten (but for their version
        counters: :meth:`forget_versions`, once the step is applied). ``keys``: the
        panes' keys (as text in the groups: :func:`_groups`)."""
        return state.forget(_texts(keys), now)

    def forget_versions(self, state: Materializer, keys: np.ndarray) -> None:
        """Forget the version counters of the groups of ``keys``."""
        state.forget_versions(_texts(keys))

    def apply(self, panes: pd.DataFrame, now: int, state: Materializer) -> pd.DataFrame:
        """The changelog of the groups that fired in one step (their last pane
        each), and of the groups merged away (sessions): their rows are withdrawn."""
        if not len(panes):
            return state.apply(panes.iloc[:0].reindex(columns=list(GROUP_COLUMNS)), None, now)
        withdrawn = panes["is_retraction"].astype(bool).to_numpy()
        new = panes[~withdrawn].drop_duplicates(_WINDOW, keep="last")
        fired = _groups(new)
        lengths = new[SOURCE].map(len).to_numpy(np.int64)
        seen = None if withdrawn.any() else state.seen_rows(fired)
        if seen is not None and (lengths >= seen).all():
            added = self._increments(new, fired, seen)
            change = state.added(fired, added, now)
            if change is not None:
                state.saw(fired, lengths)
                return change
        results = self.results(new, fired)
        # A retraction of a group that did not fire again is a window merged into
        # another one (a session bridged by later data): it no longer exists.
        gone = _groups(panes[withdrawn])
        change = state.apply(pd.concat([fired, gone], ignore_index=True), results, now)
        state.saw(fired, lengths, gone)
        return change

    def _increments(self, panes: pd.DataFrame, fired: pd.DataFrame, seen: np.ndarray):
        """The rows a step adds to the result of each group of ``panes`` (one pane
        each, ``seen[g]`` of its rows evaluated before): for each stream ``i``, the
        query over the new rows of the streams before ``i``, ``i``'s new rows and
        the old rows of the streams after it, one DuckDB query over all groups and
        terms (a term with no rows of some stream gives none, and is left out)."""
        lengths = panes[SOURCE].map(len).to_numpy(np.int64)
        n, count = len(self.streams), len(panes)
        gid = np.repeat(np.arange(count, dtype=np.int64), lengths)
        position = np.arange(len(gid), dtype=np.int64) - np.repeat(
            np.cumsum(lengths) - lengths, lengths
        )
        fresh = position >= seen[gid]
        source = flat_lists(panes[SOURCE]).astype(np.int64)
        rows, tags = [], []
        for i in range(n):
            taken = (source < i) | ((source == i) & fresh) | ((source > i) & ~fresh)
            full = np.ones(count, dtype=bool)
            for j in range(n):
                full &= np.bincount(gid[taken & (source == j)], minlength=count) > 0
            picked = np.flatnonzero(taken & full[gid])
            rows.append(picked)
            tags.append(gid[picked] + i * count)
        picked, tag = np.concatenate(rows), np.concatenate(tags)
        if not len(picked):
            return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns])
        flat = {u: flat_lists(panes[u])[picked] for s in self.streams for u in s.union}
        starts = np.tile(fired["__gs"].to_numpy(np.int64), n)
        ends = np.tile(fired["__ge"].to_numpy(np.int64), n)
        out, at = self._tagged(self.batch.text, flat, source[picked], tag, (starts, ends))
        return pd.concat([fired.iloc[at % count].reset_index(drop=True), out], axis=1)

    def results(self, panes: pd.DataFrame, fired: pd.DataFrame) -> pd.DataFrame:
        """The result rows of the groups of ``panes`` (one pane each; ``fired``: their
        group columns), with the group columns first."""
        if not len(panes):
            return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns])
        if isinstance(self.batch, BatchQuery):
            return self._batched(self.batch, panes, fired)
        parts = [self._group(panes.iloc[i], *fired.iloc[i]) for i in range(len(panes))]
        return pd.concat(parts, ignore_index=True)

    # -- all groups at once
    def _batched(self, batch: BatchQuery, panes: pd.DataFrame, fired: pd.DataFrame):
        """The batched query over the rows of all groups: each stream's rows tagged
        with their group's position in ``panes`` (``__gid``)."""
        lengths = panes[SOURCE].map(len).to_numpy(np.int64)
        gid = np.repeat(np.arange(len(panes), dtype=np.int64), lengths)
        source = flat_lists(panes[SOURCE]).astype(np.int64)
        flat = {u: flat_lists(panes[u]) for s in self.streams for u in s.union}
        starts, ends = fired["__gs"].to_numpy(np.int64), fired["__ge"].to_numpy(np.int64)
        out, at = self._tagged(batch.text, flat, source, gid, (starts, ends))
        return pd.concat([fired.iloc[at].reset_index(drop=True), out], axis=1)

    def _tagged(self, text: str, values: dict[str, np.ndarray], source, gid, bounds):
        """``text`` over the streams' rows (``values`` per union column, ``source``
        each row's stream), each tagged with its group ``gid`` (the groups'
        ``bounds``: starts, ends): the result rows, and each one's group."""
        frames = {}
        for i, layout in enumerate(self.streams):
            mask = source == i
            frame = self._frame(layout, values, mask)
            frames[layout.name] = frame.append_column(GID, pa.array(gid[mask]))
        out = self._df(self._relation(text, frames, *bounds))
        at = out.pop(GID).to_numpy(np.int64)
        return out.reset_index(drop=True), at

    # -- each row its own group
    def each_row(self, rows: pd.DataFrame, ptimes: np.ndarray, state: Materializer):
        """The changelog of a query whose operators take each row on its own
        (:mod:`headwater.sql.plan.stateless`) over ``rows`` (the union layout,
        on time) that arrived at ``ptimes``: one DuckDB query over all of them, each
        row its group (its key and instant ``[t, t + 1)``), every change an insert.
        Needs the batched query (:attr:`batch` a ``BatchQuery``)."""
        source = rows[SOURCE].to_numpy(np.int64)
        values = {u: rows[u].to_numpy() for s in self.streams for u in s.union}
        gid = np.arange(len(rows), dtype=np.int64)
        t = rows[EVENT_TIME].to_numpy(np.float64).astype(np.int64)
        out, at = self._tagged(self.batch.text, values, source, gid, (t, t + 1))
        groups = pd.DataFrame(
            {"__gk": _texts(rows[KEY].to_numpy()[at]), "__gs": t[at], "__ge": t[at] + 1}
        )
        results = pd.concat([groups, out], axis=1)
        results["ptime"] = np.asarray(ptimes, np.int64)[at]
        return state.appended(results)

    # -- one group
    def _group(self, pane: pd.Series, key: str, start: int, end: int) -> pd.DataFrame:
        """The query over one group's rows (the fallback: a DuckDB call per group)."""
        source = np.asarray(pane[SOURCE], dtype=np.int64)
        values = {u: np.asarray(pane[u], dtype=object) for s in self.streams for u in s.union}
        frames = {s.name: self._frame(s, values, source == i) for i, s in enumerate(self.streams)}
        out = self._df(self._relation(self.text, frames, np.array([start]), np.array([end])))
        out.insert(0, "__ge", end)
        out.insert(0, "__gs", start)
        out.insert(0, "__gk", key)
        return out

    def _frame(self, layout: StreamLayout, values: dict[str, np.ndarray], mask) -> pa.Table:
        """One stream's rows (``values[union][mask]``) as an Arrow table of the
        stream's own types."""
        arrays = []
        columns = zip(layout.columns, layout.union, layout.types, strict=True)
        for column, union, arrow_type in columns:
            values_of = values[union][mask] if values else np.zeros(0, dtype=object)
            if column in layout.timestamps:
                arrays.append(micros_array(values_of, arrow_type))
            else:
                arrays.append(_column(values_of, arrow_type))
        return pa.Table.from_arrays(arrays, names=list(layout.columns))

    def _relation(self, text: str, frames: dict[str, pa.Table], starts, ends):
        """``text`` over ``frames`` and the groups' bounds (``__group``: the group id
        ``__gid``, its position, and ``__gs``/``__ge``)."""
        con = self._connection()
        for name, frame in frames.items():
            con.register(name, frame)
        # a global window's bounds (a keyed group) are out of a timestamp's range; no
        # query reads them (its TVFs, if any, are computed over the group's rows)
        starts, ends = (np.clip(np.asarray(b, np.int64), _TS_MIN, _TS_MAX) for b in (starts, ends))
        # Arrow, not pandas: DuckDB registers it several times faster (TIMESTAMP_NS
        # either way, as a pandas datetime column gives)
        bounds = pa.table(
            {
                GID: pa.array(np.arange(len(starts), dtype=np.int64)),
                "__gs": pa.array(starts * 1_000_000, pa.timestamp("ns")),
                "__ge": pa.array(ends * 1_000_000, pa.timestamp("ns")),
            }
        )
        con.register(GROUP_RELATION, bounds)
        try:
            return sql_typed(con.sql(text))
        except duckdb.Error as exc:
            raise SqlError(f"query {self.name}: {str(exc).splitlines()[0]}") from None

    def _df(self, relation: duckdb.DuckDBPyRelation) -> pd.DataFrame:
        """The rows of ``relation``; a user function's failure as its FunctionError."""
        try:
            return relation.df()
        except duckdb.Error as exc:
            raise function_error(str(exc)) or SqlError(
                f"query {self.name}: {str(exc).splitlines()[0]}"
            ) from None

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = connection(registers_functions=bool(self.functions))
            register_duckdb(self._con, self.functions)
            for name, frame in self.tables.items():
                self._con.register(name, frame)
        return self._con
