"""Tables a SQL script declares with CREATE TABLE: sources and sinks.

Sources (a table with ``WATERMARK FOR``, or ``'format'`` = parquet / csv / json
/ replay with a ``'path'``): ``replay`` is a recorded stream (JSON lines of
rows and watermarks); parquet, csv and json are files, read here as they are
(the Spark runner reads a directory as a stream: ``headwater.sql.execute.spark``).
``'allowed_lateness'`` sets a source's allowed lateness (``'5 minutes'``);
``'watermark'`` (and ``'slack'``, ``'quality.*'``) its watermark strategy
(:mod:`headwater.sql.execute.hybrid`); ``'correction.archive'`` (and
``'correction.gamma'``) corrections of its dead letters (:mod:`headwater.sql.execute.correct`);
``'state.ttl'`` the time-to-live of the state of its queries' keys (:mod:`headwater.sql.plan.ttl`).
Sinks: ``'format'`` = ``changelog`` (Parquet, a directory per batch) or
``table`` (the current rows in DuckDB or PostgreSQL, ``'table'`` naming it).
Kafka tables (``'connector'`` = ``kafka`` / ``upsert-kafka``):
:mod:`headwater.sql.execute.kafka_tables`.
Delta Lake sinks (``'connector'`` = ``delta``): :mod:`headwater.sql.execute.delta_tables`.
Blackhole sinks (``'connector'`` = ``blackhole``, the changelog counted and discarded):
:mod:`headwater.sql.execute.blackhole_tables`.
"""

from __future__ import annotations

import glob
import os

import pandas as pd

from headwater.io.sinks import parquet_sink
from headwater.io.sinks.relation import RelationSink
from headwater.model.time import to_millis
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql.errors import SqlError
from headwater.sql.execute.blackhole_tables import blackhole_sink, is_blackhole
from headwater.sql.execute.correct import corrections_option
from headwater.sql.execute.delta_tables import delta_sink, is_delta
from headwater.sql.execute.files import (
    FileRead,
    check_types,
    no_rejects,
    read_csv,
    read_json_lines,
)
from headwater.sql.execute.hybrid import watermark_option
from headwater.sql.execute.kafka_tables import is_kafka, kafka_sink, kafka_source
from headwater.sql.execute.replay import read_replay
from headwater.sql.parse.ddl import SourceDef, state_ttl_ms
from headwater.sql.plan.catalog import Table

SINK_FORMATS = ("changelog", "table")
_READERS = {
    "parquet": lambda path, types: FileRead(pd.read_parquet(path), no_rejects()),
    "csv": read_csv,
    "json": read_json_lines,
}


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(p for p in glob.glob(os.path.join(path, "*")) if not p.startswith("."))
    return sorted(glob.glob(path)) or [path]


def local_source(d: SourceDef) -> Table:
    """A source of a script as the local runner reads it, with its watermark and
    correction options."""
    table = _local_table(d)
    strategy = watermark_option(d)
    if strategy is not None:
        table.watermark = strategy
    table.correction = corrections_option(d)
    table.state_ttl = state_ttl_option(d)
    return table


def state_ttl_option(d: SourceDef) -> int | None:
    """The ``'state.ttl'`` of a source (ms), None when it declares none."""
    value = d.options.get("state.ttl")
    if value is None:
        return None
    return state_ttl_ms(value, f"table {d.name!r}: option 'state.ttl'", d.line)


def _local_table(d: SourceDef) -> Table:
    if is_kafka(d):
        return kafka_source(d)
    fmt, path = d.options.get("format", "").lower(), d.options.get("path")
    if path is None:
        raise SqlError(f"table {d.name!r} has no 'path'", d.line, None, "Add WITH ('path' = ...)")
    lateness = to_millis(d.options.get("allowed_lateness"))
    if fmt == "replay":
        if d.event_time is None:
            raise SqlError(f"replay {d.name!r} needs WATERMARK FOR its event time", d.line)
        check_types(d.columns, f"table {d.name!r}", d.line)
        table = read_replay(path, d.name, d.event_time, d.columns, lateness)
        if table.watermark is None and d.watermark_delay_ms is not None:
            # No watermark events in the file: the declared bounded out-of-orderness.
            table.watermark = BoundedOutOfOrderness(d.watermark_delay_ms)
        return table
    reader = _READERS.get(fmt)
    if reader is None:
        raise SqlError(
            f"table {d.name!r}: unknown format {fmt!r}",
            d.line,
            None,
            f"Use one of {', '.join([*_READERS, 'replay'])} for a source, "
            f"{' or '.join(SINK_FORMATS)} for a sink",
        )
    if fmt != "parquet":  # Parquet's own types are read as they are
        check_types(d.columns, f"table {d.name!r}", d.line)
    reads = [reader(p, d.columns) for p in _files(path)]
    frames = [r.frame for r in reads]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*d.columns])
    for column, sql_type in d.columns.items():
        if sql_type.startswith("TIMESTAMP") and column in frame and fmt == "parquet":
            frame[column] = pd.to_datetime(frame[column], utc=True).dt.tz_localize(None)
    rejects = pd.concat([r.rejects for r in reads], ignore_index=True) if reads else None
    delay = d.watermark_delay_ms
    watermark = None if delay is None else BoundedOutOfOrderness(delay)
    return Table(
        d.name,
        frame=frame,
        event_time=d.event_time,
        watermark=watermark,
        allowed_lateness=lateness,
        types=dict(d.columns),
        rejects=rejects,
    )


def make_sink(d: SourceDef):
    """The sink a ``CREATE TABLE ... WITH ('format' = 'changelog' | 'table')`` declares."""
    if is_kafka(d):
        return kafka_sink(d)
    if is_delta(d):
        return delta_sink(d)
    if is_blackhole(d):
        return blackhole_sink(d)
    fmt, path = d.options.get("format", "").lower(), d.options.get("path")
    if path is None:
        raise SqlError(f"sink {d.name!r} has no 'path'", d.line)
    if fmt == "changelog":
        return parquet_sink(path)
    return RelationSink(path, table=d.options.get("table", d.name))


def is_sink(d: SourceDef) -> bool:
    if is_delta(d) or is_blackhole(d):
        return True  # only a sink (delta_sink and blackhole_sink refuse WATERMARK FOR)
    if d.event_time is not None:
        return False
    return is_kafka(d) or d.options.get("format", "").lower() in SINK_FORMATS
