"""The pane transform of the windowed-aggregate fast path: a step's panes -> the
changelog.

The model fires a group (GROUP BY key, window) as a pane of accumulators. All
panes of a step become one Arrow table (group columns, window bounds, each
aggregate's value), and ONE DuckDB query over it (the select list and
``HAVING``, each aggregate cast to the type DuckDB gives it on the general
path) yields every fired group's result row; :class:`GroupRows` diffs those
with what each group materialized last. Sessions run retracting: a retracted
group that did not fire again was merged into another session, and its row
is withdrawn.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from sqlglot import exp

from headwater.model.combiners import CombineFn, Count, CountDistinct, Max, Min, Sum
from headwater.model.schema import Field
from headwater.model.time import MIN_TIMESTAMP
from headwater.model.types import BOOLEAN, INT64, STRING
from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError
from headwater.sql.maintain.aggregate_state import AT, GroupParts, GroupRows
from headwater.sql.maintain.changelog import GROUP_COLUMNS
from headwater.sql.maintain.groups import logical_type, sql_typed
from headwater.sql.plan.fast_path import Shape, bare
from headwater.sql.plan.planner import QueryPlan
from headwater.sql.plan.stamps import STAMP
from headwater.sql.plan.translate import GROUP_RELATION, to_engine_sql

#: The relation a step's panes are registered as in the projection query.
PANES = "__panes"
#: The matched-row count of a group (a query with WHERE): a group of no
#: matching row has no result row.
ROWS = "__rows"
#: ``__gk`` of a query whose only group columns are the window bounds (as the
#: general path's).
NO_KEY = "0"
#: A pane's group in the model's panes.
_WINDOW = ["key", "window_start", "window_end"]
#: Version of the transform's snapshot layout.
SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class Call:
    """One model aggregation: ``kind`` of the pre-projected column ``arg``."""

    name: str
    kind: str  # sum | count | count_star | count_distinct | min | max
    arg: str | None
    timestamp: bool = False  # min/max of a timestamp, carried as epoch µs

    def combiner(self) -> CombineFn:
        return {
            "sum": Sum,
            "count": lambda: Count(skip_nulls=True),
            "count_star": Count,
            "count_distinct": CountDistinct,
            "min": Min,
            "max": Max,
        }[self.kind]()


@dataclass
class AggregateMaintainer:
    """The pane transform of the fast path: a step's panes -> the changelog.

    All fired groups of a step become result rows in one DuckDB query over the
    pane frame (group columns, window bounds, aggregates); :class:`GroupRows`
    diffs them with what each group materialized last. ``expire`` forgets
    groups whose windows the model collected (they never fire again).
    """

    name: str
    text: str  # the projection query over PANES
    columns: list[str]
    duck_types: list[str]
    arrow_types: list[pa.DataType]
    group: tuple[str, ...]
    group_types: tuple[pa.DataType, ...]
    windows: dict[str, str]
    calls: tuple[Call, ...]
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        plan: QueryPlan,
        shape: Shape,
        schema: pa.Schema,
        calls: list[Call],
        replacement: dict[str, tuple[str, ...]],
        rows: str | None,
    ) -> AggregateMaintainer:
        """The transform of a compiled query (``replacement``: each aggregate's SQL
        -> the calls it is computed from; ``rows``: the call that counts a
        group's rows matching WHERE, None without WHERE)."""
        types = {f.name.lower(): f.type for f in schema}
        group_types = tuple(types[c.lower()] for c in shape.group)
        names, duck_types, arrow_types = _reference(plan, shape, schema)
        agg_types = _aggregate_types(shape, schema, replacement)
        text = _projection_sql(shape, replacement, agg_types, names, duck_types, rows)
        return cls(
            name=plan.name,
            text=text,
            columns=names,
            duck_types=duck_types,
            arrow_types=arrow_types,
            group=shape.group,
            group_types=group_types,
            windows=shape.windows,
            calls=tuple(calls),
        )

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_con"] = None  # a connection does not travel; each process opens its own
        return state

    @property
    def types(self) -> dict[str, object]:
        return {c: logical_type(t) for c, t in zip(self.columns, self.arrow_types, strict=True)}

    def output_fields(self) -> tuple[Field, ...]:
        group = (Field("__gk", STRING), Field("__gs", INT64), Field("__ge", INT64))
        own = tuple(Field(c, t) for c, t in self.types.items())
        change = (Field("undo", BOOLEAN), Field("ptime", INT64), Field("ver", INT64))
        return group + own + change

    # -- the pane-transform protocol: restore, apply, snapshot (and expire)
    def restore(self, blob: bytes | None) -> GroupRows:
        state = GroupRows(self.columns)
        if blob:
            version, rows, versions = pickle.loads(blob)
            if version != SNAPSHOT_VERSION:
                raise ValueError(f"SQL aggregate state of version {version}; this reads 1")
            state.materialized, state.next_versions = GroupParts(rows), GroupParts(versions)
        return state

    def snapshot(self, state: GroupRows) -> bytes:
        return pickle.dumps((SNAPSHOT_VERSION, state.rows, state.versions), protocol=5)

    def expire(self, state: GroupRows, settled: int) -> None:
        """Forget the groups of windows ending by ``settled`` (``Reducer.settled``)."""
        if settled > MIN_TIMESTAMP:
            state.expire(int(settled))

    def apply(self, panes: pd.DataFrame, now: int, state: GroupRows) -> pd.DataFrame:
        if not len(panes):
            return state.apply(pd.DataFrame(columns=list(GROUP_COLUMNS)), None, now)
        retracted = panes.iloc[:0]
        if "is_retraction" in panes.columns:
            withdrawn = panes["is_retraction"].astype(bool).to_numpy()
            retracted, panes = panes[withdrawn], panes[~withdrawn]
        panes = panes.drop_duplicates(_WINDOW, keep="last")
        frame = self.pane_table(panes)
        results = self._evaluate(frame)
        fired = frame.select([*GROUP_COLUMNS, AT]).to_pandas()
        return state.apply(self._with_gone(fired, retracted), results, now)

    def _with_gone(self, fired: pd.DataFrame, retracted: pd.DataFrame) -> pd.DataFrame:
        """``fired`` and the groups of retraction panes that did not fire again: a
        session merged into another one is gone, so it fires with no result row
        (its row is withdrawn). A retracted group that fired again is superseded."""
        if not len(retracted):
            return fired
        gone = pd.DataFrame(
            {
                "__gk": _group_names(retracted["key"].to_numpy(), bool(self.group)),
                "__gs": retracted["window_start"].to_numpy(np.int64),
                "__ge": retracted["window_end"].to_numpy(np.int64),
            }
        ).drop_duplicates()
        group = list(GROUP_COLUMNS)
        again = gone.merge(fired[group], how="left", on=group, indicator=True)
        gone = gone[(again["_merge"] == "left_only").to_numpy()]
        if not len(gone):
            return fired
        gone = gone.assign(**{AT: np.arange(len(fired), len(fired) + len(gone), dtype=np.int64)})
        return pd.concat([fired, gone], ignore_index=True)

    # -- one step's panes as one table, and the query over it
    def pane_table(self, panes: pd.DataFrame) -> pa.Table:
        """Group columns, window bounds and aggregates of the fired groups."""
        keys = panes["key"].to_numpy()
        starts = panes["window_start"].to_numpy(np.int64)
        ends = panes["window_end"].to_numpy(np.int64)
        columns: dict[str, pa.Array] = {
            "__gk": pa.array(_group_names(keys, bool(self.group)), pa.string()),
            "__gs": pa.array(starts, pa.int64()),
            "__ge": pa.array(ends, pa.int64()),
            AT: pa.array(np.arange(len(panes), dtype=np.int64)),
        }
        columns.update(self.decode(keys))
        bounds = {"start": starts, "end": ends, "time": ends - 1}
        for name, which in self.windows.items():
            columns[name] = pa.array(bounds[which].astype("datetime64[ms]"), pa.timestamp("ms"))
        for c in self.calls:
            values = pa.Array.from_pandas(panes[c.name].reset_index(drop=True))
            if c.timestamp and c.kind in ("min", "max"):
                values = pc.cast(values, pa.int64()).cast(STAMP)
            columns[c.name] = values
        return pa.table(columns)

    def decode(self, keys: np.ndarray) -> dict[str, pa.Array]:
        """The GROUP BY columns of each key (one column: its value; several: a JSON
        object, see :func:`headwater.sql.execute.aggregate_local.compile_aggregate`)."""
        if not self.group:
            return {}
        carried = [pa.int64() if pa.types.is_timestamp(t) else t for t in self.group_types]
        if len(self.group) == 1:
            arrays = [pa.array(pd.Series(keys, dtype=object), carried[0], from_pandas=True)]
        else:
            text = "\n".join(keys.astype(str)).encode()
            schema = pa.schema([pa.field(f"k{i}", t) for i, t in enumerate(carried)])
            table = pa_json.read_json(
                io.BytesIO(text),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
            arrays = [table.column(f"k{i}").combine_chunks() for i in range(len(carried))]
        out = {}
        for name, array, t in zip(self.group, arrays, self.group_types, strict=True):
            out[name] = array.cast(t) if array.type != t else array
        return out

    def _evaluate(self, frame: pa.Table) -> pd.DataFrame:
        con = self._connection()
        con.register(PANES, frame)
        try:
            return con.sql(self.text).df()
        except duckdb.Error as exc:
            raise SqlError(f"query {self.name}: {str(exc).splitlines()[0]}") from None
        finally:
            con.unregister(PANES)

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = connection()
        return self._con


def _group_names(keys: np.ndarray, keyed: bool) -> np.ndarray:
    """``__gk`` of each key: its text (NULL as a marker no value prints as)."""
    if not keyed:
        return np.full(len(keys), NO_KEY, dtype=object)
    series = pd.Series(keys, dtype=object)
    return series.astype(str).where(series.notna(), "\x00NULL").to_numpy(object)


def _reference(plan: QueryPlan, shape: Shape, schema: pa.Schema):
    """Names and types of the query's result as the general path computes it
    (the group query over empty rows): the fast path yields the same."""
    empty = pa.table({f.name: pa.nulls(0, f.type) for f in schema})
    con = connection()
    con.register(shape.stream.name, empty)
    zero = pd.to_datetime([0], unit="ms")
    bounds = pd.DataFrame({"__gs": zero, "__ge": zero})
    con.register(GROUP_RELATION, bounds)

    def columns_of(name: str):
        return [f.name for f in schema]

    text = to_engine_sql(plan.group_query, "duckdb", columns_of, mode="group")
    try:
        relation = sql_typed(con.sql(text))
    except duckdb.Error as exc:
        raise SqlError(f"query {plan.name}: {str(exc).splitlines()[0]}") from None
    arrow = relation.arrow().schema
    return list(relation.columns), [str(t) for t in relation.types], list(arrow.types)


def _aggregate_types(shape: Shape, schema: pa.Schema, replacement) -> dict[str, str]:
    """DuckDB's type of each aggregate of the query (as the general path computes it)."""
    empty = pa.table({f.name: pa.nulls(0, f.type) for f in schema})
    con = connection()
    con.register(shape.stream.name, empty)
    texts = list(replacement)
    if not texts:
        return {}
    nodes = {}
    for part in (*shape.items, shape.having):
        if part is None:
            continue
        for agg in part.find_all(exp.AggFunc):
            nodes.setdefault(bare(agg).sql(), bare(agg))
    items = ", ".join(nodes[t].sql(dialect="duckdb") for t in texts)
    relation = con.sql(f'SELECT {items} FROM "{shape.stream.name}"')
    return {t: str(ty) for t, ty in zip(texts, relation.types, strict=True)}


def _projection_sql(shape, replacement, agg_types, names, duck_types, rows) -> str:
    """One query over the panes of a step: every fired group's result row."""
    inner = ["__gk", "__gs", "__ge", AT]
    inner += [exp.column(c, quoted=True).sql(dialect="duckdb") for c in shape.group]
    inner += [exp.column(w, quoted=True).sql(dialect="duckdb") for w in shape.windows]
    values: dict[str, str] = {}
    for i, (text, parts) in enumerate(replacement.items()):
        if len(parts) == 2:  # AVG: sum / non-null count
            total, count = parts
            value = f"CASE WHEN {count} > 0 THEN CAST({total} AS DOUBLE) / {count} END"
        else:
            value = parts[0]
        values[text] = f"__v{i}"
        inner.append(f"CAST({value} AS {agg_types[text]}) AS __v{i}")
    if rows is not None:
        inner.append(f"{rows} AS {ROWS}")

    def rewrite(node: exp.Expression) -> str:
        node = bare(node)
        for agg in list(node.find_all(exp.AggFunc)):
            key = agg.sql()
            if key in values:
                column = exp.column(values[key])
                if agg is node:
                    return column.sql(dialect="duckdb")
                agg.replace(column)
        return node.sql(dialect="duckdb")

    items = []
    for item, name, ty in zip(shape.items, names, duck_types, strict=True):
        body = item.this if isinstance(item, exp.Alias) else item
        quoted = exp.to_identifier(name, quoted=True).sql(dialect="duckdb")
        items.append(f"CAST({rewrite(body)} AS {ty}) AS {quoted}")
    conditions = []
    if rows is not None:
        conditions.append(f"{ROWS} > 0")
    if shape.having is not None:
        conditions.append(f"({rewrite(shape.having)})")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return (
        f"SELECT __gk, __gs, __ge, {AT}, {', '.join(items)} "
        f"FROM (SELECT {', '.join(inner)} FROM {PANES}) AS __p{where}"
    )
