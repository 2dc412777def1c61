"""Recorded streams for SQL: replay files of rows and watermarks by processing time.

A replay file is JSON lines in processing-time order, each either
``{"ptime": "<ISO>", "row": {...}}`` or ``{"ptime": "<ISO>", "watermark": "<ISO>"}``.
Lines with the same ptime form one step (see :mod:`headwater.sql.execute.local`). Column
types are inferred from the values (ISO strings in the event-time column are
timestamps) unless ``CREATE TABLE`` names them.

A path ending in ``.parquet`` is the same replay in columns: ``ptime`` (epoch ms,
or a timestamp), ``row`` (a struct of the row's columns, null on a watermark's
line) and ``watermark`` (null on a row's line), one record per line in that
order. It is read without parsing text (a NEXMark bid replay of 1,000,000 lines:
a tenth of the time), and its faults are named by record number.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from headwater.model.watermarks import Punctuated
from headwater.sql.errors import SqlError
from headwater.sql.execute.files import check_types, rejects, typed, with_guesses
from headwater.sql.plan.catalog import PTIME, Table


class ReplayError(SqlError):
    """A replay file that cannot be read; names the file and line."""


def millis(value, where: str) -> int:
    """Epoch milliseconds of an ISO timestamp (naive = UTC) or a number of ms."""
    if isinstance(value, bool):
        raise ReplayError(f"{where}: {value!r} is not a time")
    if isinstance(value, int | float):
        return int(value)
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError):
        raise ReplayError(f"{where}: cannot read {value!r} as an ISO timestamp") from None
    if ts is pd.NaT:
        raise ReplayError(f"{where}: a time cannot be null")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return int(ts.value // 1_000_000)


def read_replay(
    path: str | os.PathLike,
    name: str,
    event_time: str,
    types: Mapping[str, str] | None = None,
    allowed_lateness: int = 0,
    primary_key: Sequence[str] = (),
    vectorized: bool = True,
) -> Table:
    """The table ``name`` replayed from ``path``; ``event_time`` names its event-time column;
    ``primary_key`` the columns its rows are versions of (a versioned stream, which a
    temporal join ``FOR SYSTEM_TIME AS OF`` reads). The file is read as a whole by
    Arrow's JSON reader; a file it cannot take as is (a line that is not JSON, a
    column of two JSON types, a nested value, a value not of its column's type...)
    is read line by line, which names the line at fault (``vectorized=False``: always)."""
    _check_lateness(allowed_lateness)
    check_types(types or {}, os.fspath(path))
    read = read_columns(path, event_time, types or {}) if vectorized else None
    if read is None:
        read = _read_lines(path, name, event_time, types or {})
    frame = read.frame
    frame[PTIME] = read.ptimes
    watermarks = pd.DataFrame(read.marks, columns=["ptime", "watermark"]).astype(np.int64)
    return Table(
        name=name,
        frame=frame,
        event_time=event_time,
        watermark=Punctuated() if len(watermarks) else None,
        allowed_lateness=allowed_lateness,
        watermarks=watermarks,
        types=dict(types or {}),
        rejects=read.rejects,
        primary_key=tuple(primary_key),
    )


def _check_lateness(allowed_lateness: Any) -> None:
    """ReplayError unless ``allowed_lateness`` is a number of milliseconds, not
    negative (text or ``None`` would fail deep inside a run)."""
    number = isinstance(allowed_lateness, numbers.Real) and not isinstance(allowed_lateness, bool)
    if not number or not allowed_lateness >= 0:
        raise ReplayError(
            f"allowed_lateness must be a number of milliseconds, not negative, "
            f"not {allowed_lateness!r}",
            hint="Pass e.g. allowed_lateness=5 * 60_000 for five minutes",
        )


@dataclass(frozen=True)
class ReplayRead:
    """A replay file read: its rows, their ptimes (ms), the watermarks (ptime,
    watermark, ms) and the rejected lines (:func:`~headwater.sql.execute.files.rejects`)."""

    frame: pd.DataFrame
    ptimes: np.ndarray
    marks: list[tuple[int, int]]
    rejects: pd.DataFrame | None = None


#: The JSON values the columnar read takes as the line reader would (others: nested
#: objects and lists, a column of nulls only, are read line by line).
_FLAT = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_boolean)


def read_columns(path, event_time: str, types: Mapping[str, str]) -> ReplayRead | None:
    """The replay at ``path`` read by Arrow in one pass, or None where only the
    line reader gives the same rows (or names the line at fault)."""
    parquet = is_parquet(path)
    try:
        table = pq.read_table(path) if parquet else pajson.read_json(path)
    except (pa.ArrowInvalid, OSError):
        return None
    names = table.column_names
    if (
        "ptime" not in names
        or "row" not in names
        or not set(names) <= {"ptime", "row", "watermark"}
    ):
        return None
    if (
        not parquet
        and pa.types.is_struct(kind := table.schema.field("row").type)
        and any(pa.types.is_timestamp(f.type) for f in kind)
    ):  # ISO text Arrow took for times: read again as the text it is
        table = _as_text(path, table.schema)
        if table is None:
            return None
    row = table.column("row").combine_chunks()
    if not pa.types.is_struct(row.type) or row.type.num_fields == 0:
        return None
    flat = _FLAT + ((pa.types.is_timestamp,) if parquet else ())
    if not all(any(ok(f.type) for ok in flat) for f in row.type):
        return None
    has_row = np.asarray(row.is_valid())
    mark = table.column("watermark") if "watermark" in names else None
    has_mark = np.zeros(len(row), bool) if mark is None else np.asarray(mark.is_valid())
    ptime = _millis(table.column("ptime"))
    if ptime is None or not np.array_equal(has_row, ~has_mark) or (np.diff(ptime) < 0).any():
        return None
    marked = _millis(mark.filter(pa.array(has_mark))) if mark is not None else np.array([])
    if marked is None:
        return None
    fields = (row if has_row.all() else row.filter(pa.array(has_row))).flatten()
    frame = pd.DataFrame({f.name: a.to_pandas() for f, a in zip(row.type, fields, strict=True)})
    fractions = frame.select_dtypes("floating").to_numpy(np.float64)
    if (np.abs(fractions) >= 2.0**63).any():  # an integer beyond 64 bits, made a double
        return None
    if event_time not in frame.columns:
        return None
    frame, wrong = _typed(frame, event_time, types)
    if (wrong != "").any():
        return None
    marks = list(zip(ptime[has_mark].tolist(), marked.tolist(), strict=True))
    return ReplayRead(frame, ptime[has_row], marks)


def _as_text(path, schema: pa.Schema) -> pa.Table | None:
    """The replay read again with its rows' timestamp columns as text."""
    row = schema.field("row").type
    fields = [pa.field(f.name, pa.string()) if pa.types.is_timestamp(f.type) else f for f in row]
    explicit = schema.set(schema.get_field_index("row"), pa.field("row", pa.struct(fields)))
    try:
        return pajson.read_json(path, parse_options=pajson.ParseOptions(explicit_schema=explicit))
    except (pa.ArrowInvalid, OSError):
        return None


def _millis(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """Epoch ms of a column of times as :func:`millis` reads each (numbers as ms,
    ISO text naive = UTC), or None where a value is not one."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        values = column.to_numpy()
        return None if np.isnan(values).any() else values.astype(np.int64)
    if pa.types.is_timestamp(kind):
        stamps = column.cast(pa.timestamp("ms", tz=kind.tz)).cast(pa.int64())
        return None if stamps.null_count else stamps.to_numpy()
    if not pa.types.is_string(kind) or column.null_count:
        return None
    try:
        stamps = pd.to_datetime(pd.Series(column.to_pandas()), utc=True, format="ISO8601")
    except (TypeError, ValueError):
        return None
    if stamps.isna().any():
        return None
    return stamps.dt.tz_localize(None).to_numpy("datetime64[ms]").astype(np.int64)


def is_parquet(path) -> bool:
    """Whether ``path`` names a replay in columns (``.parquet``), not JSON lines."""
    return os.fspath(path).lower().endswith(".parquet")


def _lines(path) -> Iterator[tuple[int, str, dict, str]]:
    """Each line of the replay: its number, where it is (for errors), the object
    and its text (kept by a rejected row). A Parquet replay's records are its
    lines, numbered from 1, without the null one of ``row`` and ``watermark``."""
    if is_parquet(path):
        try:
            records = pq.read_table(path).to_pylist()
        except (pa.ArrowInvalid, OSError) as exc:
            raise ReplayError(f"{path}: not a Parquet replay ({exc})") from None
        for number, record in enumerate(records, 1):
            record = {k: v for k, v in record.items() if v is not None or k == "ptime"}
            yield number, f"{path}, record {number}", record, json.dumps(record, default=str)
        return
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                where = f"{path}, line {number}"
                yield number, where, _json_line(line, where), line.rstrip("\n")


def _read_lines(path, name: str, event_time: str, types: Mapping[str, str]) -> ReplayRead:
    """The replay read line by line (each line's faults named by its number)."""
    rows: list[dict] = []
    lines: list[tuple[int, str]] = []
    ptimes: list[int] = []
    marks: list[tuple[int, int]] = []
    last = None
    for number, where, obj, text in _lines(path):
        ptime, row, mark = _parse_line(obj, where)
        if last is not None and ptime < last:
            raise ReplayError(f"{where}: ptime goes back in time; lines must be in ptime order")
        last = ptime
        if row is not None:
            rows.append(row)
            lines.append((number, text))
            ptimes.append(ptime)
        else:
            marks.append((ptime, mark))
    frame = pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=list(types))
    if event_time not in frame.columns:
        raise ReplayError(
            f"{path}: no column {event_time!r} in its rows",
            hint=f"Its columns are {sorted(frame.columns)}; name the event time with "
            f"--event-time {name}.COLUMN",
        )
    frame, wrong = _typed(frame, event_time, types)
    keep = wrong == ""
    frame = frame[keep].reset_index(drop=True)
    dropped = [lines[j] for j in np.flatnonzero(~keep)]
    found = rejects(str(path), [n for n, _ in dropped], [t for _, t in dropped], wrong[~keep])
    return ReplayRead(frame, np.asarray(ptimes, dtype=np.int64)[keep], marks, found)


def _json_line(line: str, where: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{where}: not JSON ({exc.msg})") from None


def _parse_line(obj, where: str) -> tuple[int, dict | None, int | None]:
    if not isinstance(obj, dict) or "ptime" not in obj or obj["ptime"] is None:
        raise ReplayError(f"{where}: each line is an object with a 'ptime'")
    ptime = millis(obj["ptime"], where)
    if ("row" in obj) == ("watermark" in obj):
        raise ReplayError(f"{where}: a line has either a 'row' or a 'watermark'")
    if "row" in obj:
        if not isinstance(obj["row"], dict):
            raise ReplayError(f"{where}: 'row' must be an object of column values")
        return ptime, obj["row"], None
    return ptime, None, millis(obj["watermark"], where)


def _typed(frame: pd.DataFrame, event_time: str, types: Mapping[str, str]):
    """Columns typed by ``types``, else by their values (:func:`with_guesses`); the
    event time a timestamp (ISO text) or epoch ms. Also, per row, what value is
    not of its column's type (``''``: none): such a row is a malformed line."""
    declared = dict(types)
    if event_time not in declared and event_time in frame.columns:
        column = frame[event_time]
        times = column.dtype.kind == "M" or column.map(type).isin([str, pd.Timestamp]).any()
        declared[event_time] = "TIMESTAMP" if times else "BIGINT"
    return typed(frame, with_guesses(frame, declared))
