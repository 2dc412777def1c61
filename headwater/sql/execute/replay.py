"""Recorded streams for SQL: replay files of rows and watermarks by processing time.

A replay file is JSON lines in processing-time order, each either
``{"ptime": "<ISO>", "row": {...}}`` or ``{"ptime": "<ISO>", "watermark": "<ISO>"}``.
Lines with the same ptime form one step (see :mod:`headwater.sql.execute.local`). Column
types are inferred from the values (ISO strings in the event-time column are
timestamps) unless ``CREATE TABLE`` names them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from headwater.model.watermarks import Punctuated
from headwater.sql.errors import SqlError
from headwater.sql.execute.files import rejects, typed, with_guesses
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
) -> Table:
    """The table ``name`` replayed from ``path``; ``event_time`` names its event-time column;
    ``primary_key`` the columns its rows are versions of (a versioned stream, which a
    temporal join ``FOR SYSTEM_TIME AS OF`` reads)."""
    rows: list[dict] = []
    lines: list[tuple[int, str]] = []
    ptimes: list[int] = []
    marks: list[tuple[int, int]] = []
    last = None
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}, line {number}"
            ptime, row, mark = _parse_line(line, where)
            if last is not None and ptime < last:
                raise ReplayError(f"{where}: ptime goes back in time; lines must be in ptime order")
            last = ptime
            if row is not None:
                rows.append(row)
                lines.append((number, line.rstrip("\n")))
                ptimes.append(ptime)
            else:
                marks.append((ptime, mark))
    frame = pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=list(types or {}))
    if event_time not in frame.columns:
        raise ReplayError(
            f"{path}: no column {event_time!r} in its rows",
            hint=f"Its columns are {sorted(frame.columns)}; name the event time with "
            f"--event-time {name}.COLUMN",
        )
    frame, wrong = _typed(frame, event_time, types or {})
    keep = wrong == ""
    frame = frame[keep].reset_index(drop=True)
    frame[PTIME] = np.asarray(ptimes, dtype=np.int64)[keep]
    dropped = [lines[j] for j in np.flatnonzero(~keep)]
    found = rejects(str(path), [n for n, _ in dropped], [t for _, t in dropped], wrong[~keep])
    watermarks = pd.DataFrame(marks, columns=["ptime", "watermark"]).astype(np.int64)
    return Table(
        name=name,
        frame=frame,
        event_time=event_time,
        watermark=Punctuated() if len(watermarks) else None,
        allowed_lateness=allowed_lateness,
        watermarks=watermarks,
        types=dict(types or {}),
        rejects=found,
        primary_key=tuple(primary_key),
    )


def _parse_line(line: str, where: str) -> tuple[int, dict | None, int | None]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or "ptime" not in obj:
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
        text = frame[event_time].map(type).eq(str).any()
        declared[event_time] = "TIMESTAMP" if text else "BIGINT"
    return typed(frame, with_guesses(frame, declared))
