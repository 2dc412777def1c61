"""SQL scripts: ``CREATE TABLE`` sources and sinks, queries, ``INSERT INTO``.

A script declares its tables, then runs queries::

    CREATE TABLE Bid (bidtime TIMESTAMP, price DOUBLE, item VARCHAR,
                      WATERMARK FOR bidtime AS bidtime - INTERVAL '5' SECOND)
      WITH ('path' = 'bids/', 'format' = 'parquet');
    CREATE TABLE Winners (wstart TIMESTAMP, wend TIMESTAMP, price DOUBLE, item VARCHAR)
      WITH ('format' = 'table', 'path' = 'results.duckdb');     -- or a postgresql:// URL
    CREATE TABLE WinnerLog (...) WITH ('format' = 'changelog', 'path' = 'winners/');
    INSERT INTO Winners SELECT ... EMIT STREAM;

Sources (a table with ``WATERMARK FOR``, or ``'format'`` = parquet / csv / json
/ replay with a ``'path'``): ``replay`` is a recorded stream (JSON lines of
rows and watermarks); parquet, csv and json are files. On Spark a directory
is a stream of the files that arrive in it; a file is a bounded table (the
local runner reads what is there). ``'allowed_lateness'`` sets a source's
allowed lateness (``'5 minutes'``).

Sinks (``'format'`` = ``changelog``: the changelog as Parquet, one directory
per batch; ``table``: the current rows, kept by applying the changelog, in
DuckDB (a file path) or PostgreSQL (a URL), ``'table'`` naming the table).
A plain query's result is returned (the command line prints it).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from sqlglot import exp

from headwater.io.sinks import parquet_sink
from headwater.io.sinks.relation import RelationSink
from headwater.model.time import to_millis
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql.catalog import Table
from headwater.sql.ddl import SourceDef, source_def
from headwater.sql.dialect import parse
from headwater.sql.errors import SqlError, position
from headwater.sql.replay import read_replay

SINK_FORMATS = ("changelog", "table")
_READERS = {
    "parquet": pd.read_parquet,
    "csv": pd.read_csv,
    "json": lambda path: pd.read_json(path, lines=True),
}


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(p for p in glob.glob(os.path.join(path, "*")) if not p.startswith("."))
    return sorted(glob.glob(path)) or [path]


def local_source(d: SourceDef) -> Table:
    """A source of a script as the local runner reads it."""
    fmt, path = d.options.get("format", "").lower(), d.options.get("path")
    if path is None:
        raise SqlError(f"table {d.name!r} has no 'path'", d.line, None, "Add WITH ('path' = ...)")
    lateness = to_millis(d.options.get("allowed_lateness"))
    if fmt == "replay":
        if d.event_time is None:
            raise SqlError(f"replay {d.name!r} needs WATERMARK FOR its event time", d.line)
        return read_replay(path, d.name, d.event_time, d.columns, lateness)
    reader = _READERS.get(fmt)
    if reader is None:
        raise SqlError(
            f"table {d.name!r}: unknown format {fmt!r}",
            d.line,
            None,
            f"Use one of {', '.join([*_READERS, 'replay'])} for a source, "
            f"{' or '.join(SINK_FORMATS)} for a sink",
        )
    frames = [reader(p) for p in _files(path)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*d.columns])
    for column, sql_type in d.columns.items():
        if sql_type.startswith("TIMESTAMP") and column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True).dt.tz_localize(None)
    delay = d.watermark_delay_ms
    watermark = None if delay is None else BoundedOutOfOrderness(delay)
    return Table(
        d.name,
        frame=frame,
        event_time=d.event_time,
        watermark=watermark,
        allowed_lateness=lateness,
        types=dict(d.columns),
    )


def make_sink(d: SourceDef):
    """The sink a ``CREATE TABLE ... WITH ('format' = 'changelog' | 'table')`` declares."""
    fmt, path = d.options.get("format", "").lower(), d.options.get("path")
    if path is None:
        raise SqlError(f"sink {d.name!r} has no 'path'", d.line)
    if fmt == "changelog":
        return parquet_sink(path)
    return RelationSink(path, table=d.options.get("table", d.name))


def is_sink(d: SourceDef) -> bool:
    return d.event_time is None and d.options.get("format", "").lower() in SINK_FORMATS


def run_script(
    text: str, tables: Mapping[str, Any] | None = None, *, runner: str = "local", **options
) -> Iterator[pd.DataFrame]:
    """Run a script's statements in order; yields the result of each plain query."""
    from headwater.sql import sql

    tables = dict(tables or {})
    sinks: dict[str, Any] = {}
    for statement in parse(text):
        if isinstance(statement, exp.Create):
            d = source_def(statement)
            if is_sink(d):
                sinks[d.name.lower()] = make_sink(d)
            else:
                tables[d.name] = _source(d, runner, options)
            continue
        if isinstance(statement, exp.Insert):
            target = statement.this.name if isinstance(statement.this, exp.Table) else ""
            sink = sinks.get(target.lower())
            if sink is None:
                raise SqlError(
                    f"INSERT INTO {target!r}: no such sink",
                    *position(statement.this),
                    "Declare it with CREATE TABLE ... WITH ('format' = 'changelog' | 'table', ...)",
                )
            sql(statement.expression, tables, name=target, runner=runner).write(sink, **options)
            continue
        yield sql(statement, tables, runner=runner).to_pandas()


def _source(d: SourceDef, runner: str, options: dict) -> Table:
    if runner == "spark":
        from headwater.sql.spark import spark_source

        return spark_source(d, options)
    return local_source(d)
