"""Maintaining the second stage of a query in stages (:mod:`headwater.sql.plan.stages`)
from the first stage's changelog.

Stage 2's input is a materialized copy of stage 1's table view: at each step,
stage 1's changelog (rows added, rows withdrawn) is applied to it, and stage 2
evaluates again only the groups (its key's values) the changes touched, all of
them by one DuckDB query over their rows, then diffs each group's result with
what it materialized last (:class:`~headwater.sql.maintain.changelog.Materializer`).
A stage 2 with no key is one group, evaluated at every step that changed stage
1, which exists before any row (its result over no rows is its first version).
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.io.sinks.stores import qid
from headwater.model.time import MIN_TIMESTAMP
from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError
from headwater.sql.maintain.changelog import GROUP_COLUMNS, Materializer
from headwater.sql.maintain.groups import ONE_GROUP, sql_typed
from headwater.sql.plan.functions import ScalarFunction, function_error, register_duckdb
from headwater.sql.plan.stages import GROUP_KEY, STAGE_INPUT, Stage
from headwater.sql.plan.translate import to_engine_sql

#: The untyped rows of stage 2's input; :data:`STAGE_INPUT` casts them to stage 1's types.
_RAW = "__stage1_rows"
#: The count of a distinct row of stage 2's view (:func:`net`).
COUNT = "__hw_n"

KeyOf = Callable[[pd.DataFrame], np.ndarray]


def net(rows: pd.DataFrame, sign: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """The multiset of ``rows`` counted by ``sign`` (+1 a row added, -1 withdrawn):
    each distinct row once with its count in :data:`COUNT`, if positive, in the
    order of their first appearance."""
    counted = rows[columns].assign(**{COUNT: sign})
    total = counted.groupby(columns, dropna=False, sort=False)[COUNT].sum()
    total = total[total.to_numpy() > 0]
    kept = total.index.to_frame(index=False)
    kept.columns = columns
    kept[COUNT] = total.to_numpy(np.int64)
    return kept


def expanded(view: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The rows of a counted ``view`` (:func:`net`), each as often as its count."""
    return view.loc[view.index.repeat(view[COUNT].to_numpy(np.int64)), columns].reset_index(
        drop=True
    )


class SecondStage:
    """Stage 2 over stage 1's changelog: :meth:`begin`, then :meth:`step` per
    processing time at which stage 1 changed. ``first``: stage 1's result columns
    and DuckDB types; ``key_of``: the text of stage 2's key of rows of stage 1."""

    def __init__(
        self,
        stage: Stage,
        first: list[tuple[str, str]],
        key_of: KeyOf,
        name: str,
        functions: tuple[ScalarFunction, ...] = (),
        tables: dict[str, pd.DataFrame] | None = None,
    ) -> None:
        self.name = name
        self.key_of = key_of
        self.keyed = bool(stage.columns)
        self.inputs = [c for c, _ in first]
        names = self.inputs
        self.text = to_engine_sql(stage.query, "duckdb", lambda _: names)
        self.con = connection(registers_functions=bool(functions))
        register_duckdb(self.con, functions)
        for table, frame in (tables or {}).items():
            self.con.register(table, frame)
        casts = [f"CAST({qid(c)} AS {t}) AS {qid(c)}" for c, t in first]
        casts.append(f"CAST({GROUP_KEY} AS VARCHAR) AS {GROUP_KEY}")
        #: stage 1's table view: each distinct row once, with its count (:func:`net`)
        self.view = pd.DataFrame({c: pd.Series(dtype=object) for c in [*names, GROUP_KEY]})
        self.view[COUNT] = pd.Series(dtype=np.int64)
        self.con.register(_RAW, self.view)
        self.con.execute(f"CREATE TEMP VIEW {STAGE_INPUT} AS SELECT {', '.join(casts)} FROM {_RAW}")
        empty = self._evaluate(self.view[[*names, GROUP_KEY]])
        self.columns = [c for c in empty.columns if c not in GROUP_COLUMNS]
        #: the one group's result over no rows (None: stage 2 has a key)
        self.initial = None if self.keyed else empty
        self.state = Materializer(self.columns)
        if self.initial is not None:  # its first version, as the query's start emits it
            self.state.apply(self.initial[list(GROUP_COLUMNS)], self.initial, MIN_TIMESTAMP)

    def begin(self, now: int) -> pd.DataFrame:
        """The changelog of the query's start: the one group's rows over no rows."""
        start = Materializer(self.columns)
        if self.initial is None:
            return start.apply(pd.DataFrame(columns=list(GROUP_COLUMNS)), None, now)
        return start.apply(self.initial[list(GROUP_COLUMNS)], self.initial, now)

    def step(self, changes: pd.DataFrame, now: int) -> pd.DataFrame:
        """Stage 2's changelog at ``now`` from stage 1's changes at ``now``: only the
        rows of the groups the changes touched are netted and evaluated again."""
        undo = changes["undo"].to_numpy(bool)
        rows = changes[self.inputs].reset_index(drop=True)
        rows[GROUP_KEY] = self.key_of(rows) if self.keyed else ONE_GROUP[0]
        columns = [*self.inputs, GROUP_KEY]
        touched = pd.unique(rows[GROUP_KEY].to_numpy(object))
        hit = self.view[GROUP_KEY].isin(touched).to_numpy(bool)
        old = self.view[hit]
        both = rows.assign(**{COUNT: np.where(undo, -1, 1)})
        both = pd.concat([old, both], ignore_index=True) if len(old) else both
        mine = net(both, both[COUNT].to_numpy(np.int64), columns)
        rest = self.view[~hit]
        self.view = pd.concat([rest, mine], ignore_index=True) if len(rest) else mine
        fired = pd.DataFrame({"__gk": touched, "__gs": ONE_GROUP[1], "__ge": ONE_GROUP[2]})
        return self.state.apply(fired, self._evaluate(expanded(mine, columns)), now)

    def _evaluate(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Stage 2's query over ``rows`` of its input (one DuckDB query), its result
        rows with their group columns first."""
        self.con.register(_RAW, rows)
        try:
            out = sql_typed(self.con.sql(self.text)).df()
        except duckdb.Error as exc:
            raise function_error(str(exc)) or SqlError(
                f"query {self.name}: {str(exc).splitlines()[0]}"
            ) from None
        key = out.pop(GROUP_KEY).to_numpy(object) if self.keyed else ONE_GROUP[0]
        bounds = {"__gk": key, "__gs": ONE_GROUP[1], "__ge": ONE_GROUP[2]}
        groups = pd.DataFrame(bounds, index=out.index)
        return pd.concat([groups, out], axis=1)

    def snapshot(self) -> dict[str, pd.DataFrame]:
        """Stage 2's state as frames (its input's table view, the materialized rows
        and their versions): what a restart restores with :meth:`restore`."""
        parts = {"view": self.view, "versions": self.state.versions}
        if self.state.last is not None:
            parts["last"] = self.state.last
        return parts

    def restore(self, parts: dict[str, pd.DataFrame]) -> None:
        """Stage 2's state from a :meth:`snapshot` (as frames read back)."""
        self.view = parts["view"].reset_index(drop=True)
        self.state.versions = parts["versions"].reset_index(drop=True)
        last = parts.get("last")
        self.state.last = None if last is None else last.reset_index(drop=True)

    def result_schema(self) -> pa.Schema:
        """The Arrow types of stage 2's result columns (:attr:`columns`), as DuckDB
        gives them over no rows: a live stream's sink schema."""
        self.con.register(_RAW, self.view.iloc[:0])
        table = sql_typed(self.con.sql(self.text)).to_arrow_table()
        return pa.schema([table.schema.field(c) for c in self.columns])
