"""The backends of a current-results table: DuckDB and PostgreSQL.

A store owns the connection and the transaction; the SQL that applies a batch
(the table's DDL, the ``DELETE`` of retracted windows and the upsert) is built
by the table (:class:`~headwater.io.sinks.results.CurrentResultsSink`), the
same for both: a store only maps Arrow types to its own, stages the reduced
batch (DuckDB: registered Arrow; PostgreSQL: one ``COPY``), checks and records
the batch id in the metadata table, and reads the table back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from headwater.model.schema import WINDOW_COLUMNS


@dataclass(frozen=True)
class Layout:
    """The columns of a current-results table, as found in a batch of panes."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    meta: tuple[str, ...]  # stored pane metadata present in the batch (pane_index included)
    types: dict[str, pa.DataType]

    @property
    def windows(self) -> tuple[str, ...]:
        return WINDOW_COLUMNS

    @property
    def primary_key(self) -> tuple[str, ...]:
        return (*self.keys, *self.windows)

    @property
    def stored(self) -> tuple[str, ...]:
        """Columns of the table, ``batch_id`` excluded."""
        return (*self.primary_key, *self.values, *self.meta)


def holding(sink: Any) -> contextlib.AbstractContextManager:
    """``sink.held()`` for a sink over a store (one connection for a run of
    batches); nothing for any other sink."""
    held = getattr(sink, "held", None)
    return held() if callable(held) else contextlib.nullcontext()


def qid(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _ResultsTable(Protocol):
    """What a store needs of the table it writes (a ``CurrentResultsSink``)."""

    sink_id: str
    key_cols: tuple[str, ...] | None
    _schema: str | None
    _name: str

    def _table_sql(self) -> str: ...

    def _meta_sql(self) -> str: ...

    def _ddl(self, layout: Layout, type_of: Callable[[str, pa.DataType], str]) -> list[str]: ...

    def _apply_sql(self, layout: Any, staged: pa.Table, stage: str, batch_id: int) -> list[str]:
        """The statements that apply the staged batch, in order."""
        ...


class Store:
    """A database holding current-results tables (one per ``_ResultsTable``)."""

    dialect = ""

    def apply(self, sink: _ResultsTable, layout: Layout, staged: pa.Table, batch_id: int) -> bool:
        raise NotImplementedError

    def last_batch_id(self, sink: _ResultsTable) -> int | None:
        raise NotImplementedError

    def read(self, sink: _ResultsTable):
        raise NotImplementedError

    def reset(self, sink: _ResultsTable) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def held(self) -> contextlib.AbstractContextManager:
        """One connection for a run of batches written in one call (a store that
        keeps its connection anyway needs nothing more)."""
        return contextlib.nullcontext()

    def unconnected(self) -> Store:
        return self

    def display(self) -> str:
        return ""


def _read_sql(sink: _ResultsTable, columns: list[tuple[str, str]]) -> str:
    """SELECT of the table with infinite timestamps (window bounds) as null."""
    exprs = []
    for name, data_type in columns:
        if "TIMESTAMP" in data_type.upper():
            exprs.append(f"CASE WHEN isfinite({qid(name)}) THEN {qid(name)} END AS {qid(name)}")
        else:
            exprs.append(qid(name))
    return f"SELECT {', '.join(exprs)} FROM {sink._table_sql()}"


def _order(frame, sink: _ResultsTable):
    keys = [c for c in (*(sink.key_cols or ()), *WINDOW_COLUMNS) if c in frame]
    if sink.key_cols is None and "window_start" in frame:
        keys = list(frame.columns[: list(frame.columns).index("window_end") + 1])
    return frame.sort_values(keys, kind="stable").reset_index(drop=True) if keys else frame


class DuckDBStore(Store):
    dialect = "duckdb"

    def __init__(self, path: str) -> None:
        self.path = path
        self._memory = None
        self._held = None

    def display(self) -> str:
        return repr(self.path)

    def unconnected(self) -> DuckDBStore:
        return DuckDBStore(self.path)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Any]:
        import duckdb

        if self.path == ":memory:":
            if self._memory is None:
                self._memory = duckdb.connect(":memory:")
            yield self._memory
            return
        if self._held is not None:
            yield self._held
            return
        # A connection per batch: the file is not locked between batches, so other
        # processes can read it.
        con = self._open()
        try:
            yield con
        finally:
            con.close()

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None

    def _open(self) -> Any:
        """A connection to the file; its directory made as the file sinks make theirs."""
        import duckdb

        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        return duckdb.connect(self.path)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep one connection open while a run of batches is written in one call
        (a local replay's steps): opening and closing the file, which checkpoints
        it, for each batch was half of a local NEXMark q0's time (docs/nexmark.md).
        The file stays locked until the run ends."""
        if self.path == ":memory:" or self._held is not None:
            yield
            return
        self._held = self._open()
        try:
            yield
        finally:
            con, self._held = self._held, None
            con.close()

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
            # a column NULL in every row so far: DuckDB's own type for an untyped NULL
            pa.null(): "INTEGER",
        }
        if t in simple:
            return simple[t]
        if pa.types.is_timestamp(t):
            return "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
        if pa.types.is_decimal(t):
            return f"DECIMAL({t.precision}, {t.scale})"
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return DuckDBStore.type_of(col, t.value_type) + "[]"
        raise TypeError(f"column {col!r}: no DuckDB type for Arrow type {t}")

    def _last(self, con: Any, sink: _ResultsTable) -> int | None:
        try:
            rows = con.execute(
                f"SELECT batch_id FROM {sink._meta_sql()} WHERE sink_id = ?", [sink.sink_id]
            ).fetchall()
        except Exception as exc:  # noqa: BLE001
            if "does not exist" in str(exc):
                return None
            raise
        return int(rows[0][0]) if rows else None

    def last_batch_id(self, sink: _ResultsTable) -> int | None:
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
                    for statement in sink._apply_sql(layout, staged, stage, batch_id):
                        con.execute(statement)
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


class PostgresStore(Store):
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

    def unconnected(self) -> PostgresStore:
        return PostgresStore(self.url)

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
            # a column NULL in every row so far: PostgreSQL's own type for an untyped NULL
            pa.null(): "TEXT",
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
            return PostgresStore.type_of(col, inner) + "[]"
        raise TypeError(f"column {col!r}: no PostgreSQL type for Arrow type {t}")

    def _last(self, cur: Any, sink: _ResultsTable, lock: bool = False) -> int | None:
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

    def last_batch_id(self, sink: _ResultsTable) -> int | None:
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
            types = {c: self.type_of(c, layout.types[c]) for c in cols if c != "is_retraction"}
            defs = [f"{qid(c)} {types.get(c, 'BOOLEAN')}" for c in cols]
            cur.execute(f"CREATE TEMP TABLE {stage} ({', '.join(defs)}) ON COMMIT DROP")
            # Bulk load: one COPY stream, not a statement per row.
            with cur.copy(f"COPY {stage} ({', '.join(qid(c) for c in cols)}) FROM STDIN") as copy:
                for row in zip(*(col.to_pylist() for col in staged.columns), strict=True):
                    copy.write_row(row)
            for statement in sink._apply_sql(layout, staged, stage, batch_id):
                cur.execute(statement)
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
