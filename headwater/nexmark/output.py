"""Writing generated NEXMark events: Parquet, replay files, CSV.

* ``parquet``: ``DIR/<table>/part-00000.parquet``...: file k of each table holds
  that table's events among arrival positions [k*N, (k+1)*N) of all events, so
  that a Spark file stream reading the three directories in order sees the
  events in arrival order, N events per step.
* ``replay``: ``DIR/<table>.jsonl`` in the format of :mod:`headwater.sql.execute.replay`:
  each row at its arrival time rounded up to a step of ``step_ms`` (``ptime``,
  epoch ms: the rows of one step are one micro-batch) and, every
  ``watermark_every_ms`` of arrival time, the watermark the generator knows to be
  exact (``ptime - out_of_order_ms - 1``: no later event is older), then a last
  watermark after all events that closes every window.
* ``replay-parquet``: ``DIR/<table>.replay.parquet``, the same replay in columns
  (``ptime``, ``row``, ``watermark``: :mod:`headwater.sql.execute.replay`), which the
  local runner reads without parsing text.
* ``csv``: ``DIR/<table>.csv`` without a header, times as ``yyyy-MM-dd
  HH:mm:ss.SSS`` (what Flink's csv format reads for TIMESTAMP(3)).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from headwater.io.arrival import in_arrival_order
from headwater.nexmark.generator import NexmarkEvents

FORMATS = ("parquet", "replay", "replay-parquet", "csv")
#: The last watermark is this far after the last event time (closes any window
#: up to a day long, the longest the Flink queries use).
END_OF_STREAM_MS = 86_400_000


def write(
    events: NexmarkEvents,
    out: str | os.PathLike,
    formats=FORMATS,
    events_per_file: int = 10_000,
    watermark_every_ms: int = 1000,
    step_ms: int = 100,
) -> dict[str, list[str]]:
    """Write ``events`` under ``out`` in ``formats``; format -> the paths written."""
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
    Path(out).mkdir(parents=True, exist_ok=True)
    written: dict[str, list[str]] = {}
    if "parquet" in formats:
        written["parquet"] = write_parquet(events, out, events_per_file)
    if "replay" in formats:
        written["replay"] = write_replay(events, out, watermark_every_ms, step_ms)
    if "replay-parquet" in formats:
        written["replay-parquet"] = write_replay_parquet(events, out, watermark_every_ms, step_ms)
    if "csv" in formats:
        written["csv"] = write_csv(events, out)
    return written


def write_parquet(events: NexmarkEvents, out, events_per_file: int) -> list[str]:
    """One directory per table, file k holding arrival positions [k*N, (k+1)*N)."""
    if events_per_file <= 0:
        raise ValueError(f"events_per_file must be > 0, not {events_per_file}")
    files = max(1, -(-events.events // events_per_file))
    bounds = np.arange(files + 1) * events_per_file
    paths = []
    for name, table in events.tables.items():
        folder = Path(out) / name
        folder.mkdir(parents=True, exist_ok=True)
        cuts = np.searchsorted(events.position[name], bounds)
        written = [folder / f"part-{k:05d}.parquet" for k in range(files)]
        for k, path in enumerate(written):  # one file per N events, not per event
            pq.write_table(table.slice(cuts[k], cuts[k + 1] - cuts[k]), path)
        for stale in set(folder.glob("part-*.parquet")) - set(written):
            stale.unlink()  # an earlier write's: a file stream would read it too
        in_arrival_order(written)
        paths += map(str, written)
    return paths


def steps(times: np.ndarray, step_ms: int) -> np.ndarray:
    """Arrival times rounded up to a multiple of ``step_ms`` (the step that sees them)."""
    if step_ms <= 0:
        raise ValueError(f"step_ms must be > 0, not {step_ms}")
    return -(-np.asarray(times, dtype=np.int64) // step_ms) * step_ms


def replay_lines(
    events: NexmarkEvents, name: str, watermark_every_ms: int, step_ms: int = 1
) -> pa.Array:
    """The replay file of table ``name`` as JSON lines (one string per line). A
    watermark's step comes after every row that arrived before it (rows first
    within a step), so it stays exact."""
    table = events.tables[name]
    arrival = steps(events.arrival[name], step_ms)
    rows = _json_objects(table)
    lines = join_strings('{"ptime": ', _ints(arrival), ', "row": ', rows, "}")
    marks_at, marks = watermarks(events, watermark_every_ms)
    marks_at = steps(marks_at, step_ms)
    mark_lines = join_strings('{"ptime": ', _ints(marks_at), ', "watermark": ', _ints(marks), "}")
    # Rows before the watermark of the same ptime (one step: rows, then its watermark).
    order = np.lexsort(
        (np.r_[np.zeros(len(arrival)), np.ones(len(marks_at))], np.r_[arrival, marks_at])
    )
    return pc.take(pa.concat_arrays([lines, mark_lines]), pa.array(order))


def replay_table(
    events: NexmarkEvents, name: str, watermark_every_ms: int, step_ms: int = 1
) -> pa.Table:
    """The replay of table ``name`` in columns, in the order of :func:`replay_lines`:
    ``ptime`` (epoch ms), ``row`` (the event; null on a watermark) and ``watermark``
    (epoch ms; null on a row)."""
    table = events.tables[name]
    arrival = steps(events.arrival[name], step_ms)
    marks_at, marks = watermarks(events, watermark_every_ms)
    marks_at = steps(marks_at, step_ms)
    columns = [c.combine_chunks() for c in table.columns]
    rows = pa.StructArray.from_arrays(columns, fields=list(table.schema))
    order = np.lexsort(
        (np.r_[np.zeros(len(arrival)), np.ones(len(marks_at))], np.r_[arrival, marks_at])
    )
    ptime = np.r_[arrival, marks_at].astype(np.int64)[order]
    row = pa.concat_arrays([rows, pa.nulls(len(marks_at), rows.type)]).take(pa.array(order))
    values = np.r_[np.zeros(len(arrival), np.int64), marks.astype(np.int64)][order]
    has_mark = np.r_[np.zeros(len(arrival), bool), np.ones(len(marks_at), bool)][order]
    mark = pa.array(values, pa.int64(), mask=~has_mark)
    return pa.table({"ptime": ptime, "row": row, "watermark": mark})


def write_replay_parquet(
    events: NexmarkEvents, out, watermark_every_ms: int, step_ms: int
) -> list[str]:
    paths = []
    for name in events.tables:
        path = Path(out) / f"{name}.replay.parquet"
        pq.write_table(replay_table(events, name, watermark_every_ms, step_ms), path)
        paths.append(str(path))
    return paths


def watermarks(events: NexmarkEvents, every_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptime, watermark) pairs, epoch ms: one per ``every_ms`` of arrival time, and
    one after the last arrival that passes every event time by a day."""
    arrivals = np.concatenate([a for a in events.arrival.values()]) if events.events else None
    if arrivals is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first, last = int(arrivals.min()), int(arrivals.max())
    at = np.arange(first - first % every_ms + every_ms, last + 1, every_ms, dtype=np.int64)
    marks = at - events.config.out_of_order_ms - 1
    end = last + END_OF_STREAM_MS
    return np.r_[at, last + 1], np.r_[marks, end]


def write_replay(events: NexmarkEvents, out, watermark_every_ms: int, step_ms: int) -> list[str]:
    paths = []
    for name in events.tables:
        lines = replay_lines(events, name, watermark_every_ms, step_ms)
        path = Path(out) / f"{name}.jsonl"
        _write_lines(lines, path)
        paths.append(str(path))
    return paths


def write_csv(events: NexmarkEvents, out) -> list[str]:
    paths = []
    options = pacsv.WriteOptions(include_header=False)
    for name, table in events.tables.items():
        path = Path(out) / f"{name}.csv"
        pacsv.write_csv(_flink_times(table), path, write_options=options)
        paths.append(str(path))
    return paths


def _flink_times(table: pa.Table) -> pa.Table:
    """Timestamps as ``yyyy-MM-dd HH:mm:ss.SSS`` strings."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            # %S of a millisecond timestamp is seconds with three decimals
            text = pc.strftime(table.column(i), format="%Y-%m-%d %H:%M:%S")
            table = table.set_column(i, field.name, text)
    return table


def _json_objects(table: pa.Table) -> pa.Array:
    """Each row as a JSON object (times as ISO strings), built column-wise."""
    parts: list = []
    for i, field in enumerate(table.schema):
        column = table.column(i).combine_chunks()
        key = ("{" if i == 0 else ", ") + f'"{field.name}": '
        parts += [key, _json_values(column)]
    return join_strings(*parts, "}")


def _json_values(column: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(column.type):
        return join_strings('"', pc.strftime(column, format="%Y-%m-%dT%H:%M:%S"), '"')
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.string())
    escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
    return join_strings('"', escaped, '"')


def _ints(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), pa.string())


def join_strings(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _write_lines(lines: pa.Array, path: Path) -> None:
    """One line per string, written from the Arrow buffer (no Python string per line)."""
    joined = join_strings(lines, "\n").cast(pa.large_string())
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[: len(joined) + 1]
    data = joined.buffers()[2]
    with open(path, "wb") as fh:
        if len(joined):
            fh.write(memoryview(data)[offsets[0] : offsets[-1]])
