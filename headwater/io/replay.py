"""Replay source: play a recorded timeline into Spark Structured Streaming.

A timeline is a list of *steps*. Each step has a processing time, a bundle of
rows (possibly empty) and optionally a new watermark (a punctuated watermark).
The source plays **exactly one step per micro-batch**: ``latestOffset`` moves
by one step per call, whatever the read limit, so a transcript's
``input`` / ``watermark`` / ``clock`` events map one-to-one onto micro-batches
(docs/semantics.md, rule 7).

Register it once per SparkSession and read it as a stream::

    from headwater.io.replay import register_replay_source, write_timeline

    write_timeline("/tmp/t.jsonl", steps, columns={"value": "double"})
    register_replay_source(spark)
    df = spark.readStream.format("headwater_replay").option("path", "/tmp/t.jsonl").load()

File format (JSON lines, UTF-8)
-------------------------------
The first line *may* be a header object; every other non-blank line is one
step, in play order::

    {"headwater_replay": 1, "key_type": "string", "columns": {"value": "double"}}
    {"proc_ms": 0, "rows": [["a", 1000, 3.0], ["b", 1500, 1.0]]}
    {"proc_ms": 0, "watermark_ms": 2000}
    {"proc_ms": 5000}
    {"proc_ms": 5000, "watermark_ms": "inf", "rows": [{"key": "a", "ts": 400, "value": 2.0}]}

Header (all keys optional):

* ``headwater_replay``: format version, 1.
* ``key_type``: Spark SQL type of the ``key`` column (default ``string``).
* ``columns``: ordered map ``name -> Spark SQL type`` of the value columns
  (default ``{"value": "double"}``). Names ``kind``, ``key``, ``ts``,
  ``watermark_ms``, ``proc_ms``, ``step`` are reserved.

Step (all keys optional):

* ``proc_ms``: processing time of the step in epoch milliseconds; defaults to
  the previous step's (0 for the first step). Must not decrease.
* ``watermark_ms``: the watermark after this step (epoch ms, or the string
  ``"inf"`` for the end of input). Omitted or ``null``: unchanged. The
  watermark never goes back: a smaller value is an error.
* ``rows``: the bundle, each row either a list ``[key, ts, v1, v2, ...]``
  (values in header column order) or an object ``{"key": ..., "ts": ...,
  "<column>": ...}`` (missing columns are null). ``ts`` is the event
  timestamp in epoch ms.
* ``timers``: whether the step fires the processing-time timers due by its
  ``proc_ms`` after its rows and watermark (rule 7). Default: a step fires them
  when its ``proc_ms`` moves processing time forward, or when it has neither
  rows nor a watermark (a transcript's ``clock`` event, which fires due timers
  even when the time did not move); a step that only adds rows or advances the
  watermark at the current processing time (a transcript's ``input`` or
  ``watermark`` event) does not.

Output schema of the stream::

    kind STRING          'data' for a row of the bundle, 'tick' for the control row
                         ('clock' for that of a step that fires timers)
    key <key_type>       null on ticks
    ts BIGINT            event timestamp (ms); null on ticks
    <value columns...>   null on ticks
    watermark_ms BIGINT  the watermark *after* the step (carried forward);
                         null while no watermark has been given yet
    proc_ms BIGINT       the step's processing time
    step BIGINT          the step's index (0-based)

Every step emits exactly one ``tick`` row in addition to its data rows, so a
step without rows still produces a micro-batch with input. The Spark streaming
runner fans each tick out to *every* shard of its stateful operator (it knows
the shard count; the source does not need to), so watermark and clock
advances reach shards that got no data and fire their timers. The control row
of a step that fires timers (``timers``, above) has kind ``clock``: that step
fires the processing-time timers due by its time even when the time did not
move (rule 7), which the runner could not tell from a bundle or a watermark
step at the same time otherwise.

Reading is stateless: the driver indexes the file once (byte offset,
processing time and effective watermark of every step); a partition carries
one step's byte range, which the executor reads and decodes into one Arrow
record batch (so on a cluster the file must be readable at the same path on
the executors). Offsets are ``{"step": n}`` (steps played), so a query
restarted from its checkpoint resumes at the next step.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from headwater.io.python_source import read_stream

FORMAT_NAME = "headwater_replay"
RESERVED = ("kind", "key", "ts", "watermark_ms", "proc_ms", "step")
DEFAULT_COLUMNS: dict[str, str] = {"value": "double"}


def _max_timestamp() -> int:
    try:
        from headwater.model.time import MAX_TIMESTAMP

        return int(MAX_TIMESTAMP)
    except ImportError:  # pragma: no cover - the core not installed yet
        return 2**62


def _watermark(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "+inf", "infinity", ".inf"):
            return _max_timestamp()
        return int(value)
    if isinstance(value, float) and value == float("inf"):
        return _max_timestamp()
    return int(value)


# --------------------------------------------------------------------- writing


def write_timeline(
    path: str | os.PathLike,
    steps: Iterable[Mapping[str, Any]],
    *,
    columns: Mapping[str, str] | None = None,
    key_type: str = "string",
) -> None:
    """Write a timeline file.

    ``steps``: mappings with optional ``proc_ms``, ``watermark_ms`` (int,
    ``"inf"`` or ``float('inf')``) and ``rows`` (lists ``[key, ts, *values]``
    or dicts), as described in the module docstring.
    """
    cols = dict(DEFAULT_COLUMNS if columns is None else columns)
    _check_columns(cols)
    with open(path, "w", encoding="utf-8") as f:
        header = {"headwater_replay": 1, "key_type": key_type, "columns": cols}
        f.write(json.dumps(header) + "\n")
        for step in steps:
            out: dict[str, Any] = {}
            if step.get("proc_ms") is not None:
                out["proc_ms"] = int(step["proc_ms"])
            wm = step.get("watermark_ms")
            if wm is not None:
                wm_ms = _watermark(wm)
                out["watermark_ms"] = "inf" if wm_ms == _max_timestamp() else wm_ms
            rows = step.get("rows")
            if rows:
                out["rows"] = [list(r) if not isinstance(r, Mapping) else dict(r) for r in rows]
            if step.get("timers") is not None:
                out["timers"] = bool(step["timers"])
            f.write(json.dumps(out, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    # numpy scalars and the like
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Decimal):  # as text: a JSON number would round it through a float
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _check_columns(cols: Mapping[str, str]) -> None:
    for name in cols:
        if name in RESERVED:
            raise ValueError(f"replay value column name {name!r} is reserved ({RESERVED})")


# --------------------------------------------------------------------- reading


class Timeline:
    """The driver-side index of a timeline file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.key_type = "string"
        self.columns: dict[str, str] = dict(DEFAULT_COLUMNS)
        # per step: (byte offset, byte length, proc_ms, effective watermark or None)
        # per step: (byte offset, byte length, proc_ms, effective watermark or None,
        # whether it fires processing-time timers)
        self.steps: list[tuple[int, int, int, int | None, bool]] = []
        proc = 0
        wm: int | None = None
        with open(path, "rb") as f:
            offset = 0
            first = True
            for raw in f:
                start, offset = offset, offset + len(raw)
                line = raw.strip()
                if not line:
                    continue
                obj = json.loads(line)
                if first and "headwater_replay" in obj:
                    first = False
                    self.key_type = obj.get("key_type", "string")
                    if obj.get("columns") is not None:
                        self.columns = dict(obj["columns"])
                    _check_columns(self.columns)
                    continue
                first = False
                moved = False
                if obj.get("proc_ms") is not None:
                    p = int(obj["proc_ms"])
                    if p < proc:
                        raise ValueError(
                            f"{path}: step {len(self.steps)}: proc_ms {p} goes back (was {proc})"
                        )
                    moved, proc = p > proc, p
                new_wm = _watermark(obj.get("watermark_ms"))
                if new_wm is not None:
                    if wm is not None and new_wm < wm:
                        raise ValueError(
                            f"{path}: step {len(self.steps)}: watermark {new_wm} goes back "
                            f"(was {wm})"
                        )
                    wm = new_wm
                fires = obj.get("timers")
                if fires is None:
                    clock_step = not obj.get("rows") and obj.get("watermark_ms") is None
                    fires = moved or clock_step
                self.steps.append((start, len(raw), proc, wm, bool(fires)))

    def schema_ddl(self) -> str:
        parts = ["kind STRING", f"key {self.key_type}", "ts BIGINT"]
        parts += [f"`{name}` {typ}" for name, typ in self.columns.items()]
        parts += ["watermark_ms BIGINT", "proc_ms BIGINT", "step BIGINT"]
        return ", ".join(parts)


def _decode_step(
    path: str,
    index: int,
    offset: int,
    length: int,
    proc_ms: int,
    watermark_ms: int | None,
    fires: bool,
    names: Sequence[str],
    schema: pa.Schema,
) -> pa.RecordBatch:
    with open(path, "rb") as f:
        f.seek(offset)
        obj = json.loads(f.read(length))
    rows = obj.get("rows") or []
    n_values = len(names)
    keys: list[Any] = []
    tss: list[Any] = []
    vals: list[list[Any]] = [[] for _ in range(n_values)]
    for row in rows:  # decoding JSON is per row by nature; replays are small
        if isinstance(row, Mapping):
            keys.append(row.get("key"))
            tss.append(row.get("ts"))
            for i, name in enumerate(names):
                vals[i].append(row.get(name))
        else:
            keys.append(row[0])
            tss.append(row[1])
            for i in range(n_values):
                vals[i].append(row[2 + i] if 2 + i < len(row) else None)
    n = len(rows) + 1  # + the tick row
    control = "clock" if fires else "tick"
    arrays = [
        pa.array(["data"] * len(rows) + [control], pa.string()),
        pa.array(keys + [None], schema.field("key").type),
        pa.array(tss + [None], pa.int64()),
    ]
    for i, name in enumerate(names):
        arrays.append(_values(vals[i] + [None], schema.field(name).type))
    arrays += [
        pa.array([watermark_ms] * n, pa.int64()),
        pa.array([proc_ms] * n, pa.int64()),
        pa.array([index] * n, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _values(values: list[Any], type_: pa.DataType) -> pa.Array:
    """One column of a step; a DECIMAL's values were written as text (exact)."""
    if pa.types.is_decimal(type_):
        values = [None if v is None else Decimal(str(v)) for v in values]
    return pa.array(values, type_)


def _arrow_schema(spark_schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


try:  # pyspark is only needed when the source is actually used
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover
    DataSource = object  # type: ignore[misc,assignment]
    DataSourceStreamReader = object  # type: ignore[misc,assignment]
    InputPartition = object  # type: ignore[misc,assignment]
    SupportsTriggerAvailableNow = object  # type: ignore[misc,assignment]


class ReplayStepPartition(InputPartition):  # type: ignore[misc]
    def __init__(
        self,
        index: int,
        offset: int,
        length: int,
        proc_ms: int,
        watermark_ms: int | None,
        fires: bool,
    ) -> None:
        self.index = index
        self.offset = offset
        self.length = length
        self.proc_ms = proc_ms
        self.watermark_ms = watermark_ms
        self.fires = fires


class ReplayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """One step per micro-batch; offsets are ``{"step": number of steps played}``."""

    def __init__(self, path: str, schema: Any) -> None:
        self.path = path
        self.timeline = Timeline(path)
        self.schema = schema
        self._target = len(self.timeline.steps)

    def initialOffset(self) -> dict:
        return {"step": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        # Exactly one step per micro-batch, whatever the limit: a step is the unit
        # of the replayed timeline (a bundle plus a watermark/clock advance).
        done = 0 if start is None else int(start["step"])
        return {"step": min(done + 1, self._target)}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = len(self.timeline.steps)

    def partitions(self, start: dict, end: dict) -> Sequence[ReplayStepPartition]:
        out = []
        for i in range(int(start["step"]), int(end["step"])):
            out.append(ReplayStepPartition(i, *self.timeline.steps[i]))
        return out

    def read(self, partition: ReplayStepPartition) -> Iterator[pa.RecordBatch]:
        schema = _arrow_schema(self.schema)
        names = [f.name for f in self.schema.fields[3:-3]]
        yield _decode_step(
            self.path,
            partition.index,
            partition.offset,
            partition.length,
            partition.proc_ms,
            partition.watermark_ms,
            partition.fires,
            names,
            schema,
        )

    def commit(self, end: dict) -> None:
        pass


class ReplayDataSource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("headwater_replay").option("path", FILE).load()``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise ValueError("headwater_replay: option 'path' (a timeline .jsonl file) is required")
        return os.path.abspath(path)

    def schema(self) -> str:
        return Timeline(self._path()).schema_ddl()

    def streamReader(self, schema: Any) -> ReplayStreamReader:
        return ReplayStreamReader(self._path(), schema)


def register_replay_source(spark: Any) -> None:
    """Register the ``headwater_replay`` format with ``spark`` (idempotent), for a
    user's own ``spark.readStream.format("headwater_replay")``."""
    spark.dataSource.register(ReplayDataSource)


def read_replay(spark: Any, path: str | os.PathLike) -> Any:
    """The replay of timeline file ``path`` as a streaming DataFrame."""
    return read_stream(spark, ReplayDataSource, {"path": str(path)})
