"""The versioned state format of a :class:`~headwater.model.reducer.Reducer`.

``Reducer.snapshot()`` returns, and ``Reducer.restore()`` reads, one blob per
shard. The Spark streaming runner keeps it in Spark's state store, so it
outlives the process (and the headwater version) that wrote it. Layout, all
integers little-endian:

============  ======  =====================================================
offset        size    content
============  ======  =====================================================
0             8       magic ``b"HWSTATE\\x00"``
8             4       format version (uint32), :data:`FORMAT_VERSION`
12            8 + n   section 1, **windows**: byte length (uint64), then an
                      Arrow IPC stream (one record batch; buffers compressed
                      with zstd; blobs of earlier releases have uncompressed
                      buffers, which read as well: the stream says which)
...           8 + n   section 2, **keys**: likewise
...           8 + n   section 3, **retractions**: likewise
============  ======  =====================================================

**windows**: one row per live window of the shard, one column per column of
the reducer's window table (``WindowTable.cols``; the names are spelled in
:mod:`headwater.model.window_table`): ``key`` (a code into the keys section),
``start``, ``end``, pane bookkeeping (``pending``, ``closed``,
``eow_timer``, ``ontime_data``, ``hold``, ``has_hold``, ``pane_index``,
``nonspec_index``, ``has_last``), trigger state ``t:<path>``, combiner
accumulators ``acc:<output>:<field>`` and, for retracting mode, the last pane
``last:<output>`` / ``last:timestamp`` / ``last:pane_index`` /
``last:nonspec_index`` / ``last:timing``. The schema metadata holds the scalars
``headwater.watermark``, ``headwater.now`` and ``headwater.dropped_count``
(decimal strings, milliseconds for the first two) and
``headwater.format_version``.

**keys**: one column ``key``; row *i* is the key whose code is *i*.

**retractions**: the retractions waiting for their owner window to fire
(``owner_key``, ``owner_start``, ``owner_end``, then the columns of a pane;
``key`` and ``owner_key`` are key codes). No columns when there are none.

Column encodings: numeric and boolean numpy columns are Arrow primitives.
Accumulators are encoded by their combiner
(:meth:`~headwater.model.combiners.CombineFn.accumulator_to_arrow` /
``accumulator_from_arrow``): the built-in combiners use lists, fixed-size lists
and structs of primitives. Other object columns (keys, pane values, a user
combiner's scalar accumulators) use :func:`objects_to_arrow`: ``None``, bool,
int (64-bit), float, str and bytes values, and lists of them, map to the
matching Arrow type (a dense union when a column mixes kinds, so every value
comes back with its kind). **The one escape hatch**: a value of any other type
(a user-defined accumulator object, a tuple, ...) makes its column a binary
column of per-value pickles, flagged by the Arrow extension type
``headwater.pickled`` in the field metadata. Built-in combiners never use it.

Reading: the current version restores exactly. Version 0 is the format before
this one, a pickle of the same state (it starts with ``b"\\x80"``); it is
converted, and columns it lacks get their defaults. Any other version is refused
with :class:`StateFormatError`.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.model.arrow_values import (
    array_from_arrow,
    array_to_arrow,
    exact_numpy,
    is_primitive,
    objects_from_arrow,
    objects_to_arrow,
)
from headwater.model.combiners import CombineFn
from headwater.model.window_table import split_acc_column

MAGIC = b"HWSTATE\x00"
#: The version :func:`dumps` writes.
FORMAT_VERSION = 1
#: The versions :func:`loads` reads (0: the pickle of headwater before the format).
READABLE_VERSIONS = (0, 1)
_HEADER = struct.Struct("<8sI")
_LENGTH = struct.Struct("<Q")
_META = "headwater."
_OBJECT = b"headwater.numpy_object"  # field metadata: the numpy column was dtype object


class StateFormatError(ValueError):
    """A state blob this headwater cannot read."""


@dataclass
class ReducerState:
    """What a snapshot holds: key codes index ``keys``, in ``cols`` and ``queue``."""

    keys: np.ndarray
    cols: dict[str, np.ndarray]
    queue: pd.DataFrame
    watermark: int
    now: int
    dropped_count: int


# ---------------------------------------------------------------- read / write
#: Buffers compressed with zstd: a shard's window table is mostly small integers
#: and repeated bounds, so its blob shrinks about 15 times (17 MB to 1.1 MB for
#: 160,000 windows of ``headwater bench sql``) for about 15 ms, and the state
#: store's round trip, which costs in proportion to the blob, shrinks with it.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def _ipc(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _frame_to_table(frame: pd.DataFrame) -> pa.Table:
    return pa.table({c: array_to_arrow(exact_numpy(frame[c])) for c in frame.columns})


def _table_to_frame(table: pa.Table) -> pd.DataFrame:
    if table.num_columns == 0:
        return pd.DataFrame()
    return pd.DataFrame({name: array_from_arrow(table.column(name)) for name in table.column_names})


def dumps(state: ReducerState, aggregations: dict[str, tuple[CombineFn, str | None]]) -> bytearray:
    """The blob of ``state`` (the current :data:`FORMAT_VERSION`)."""
    fields, columns = [], []
    for name, arr in state.cols.items():
        fn, field = _combiner_of(name, aggregations)
        if fn is not None:
            column = fn.accumulator_to_arrow(field, arr)
        else:
            column = array_to_arrow(arr)
        # An object column of plain numbers (a user accumulator) stays one.
        as_object = arr.dtype == object and is_primitive(column.type)
        fields.append(pa.field(name, column.type, metadata={_OBJECT: b"1"} if as_object else None))
        columns.append(column)
    meta = {
        _META + "format_version": str(FORMAT_VERSION),
        _META + "watermark": str(int(state.watermark)),
        _META + "now": str(int(state.now)),
        _META + "dropped_count": str(int(state.dropped_count)),
    }
    windows = pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=meta))
    keys = pa.table({"key": objects_to_arrow(state.keys)})
    sections = [windows, keys, _frame_to_table(state.queue)]
    parts = [_HEADER.pack(MAGIC, FORMAT_VERSION)]
    for section in map(_ipc, sections):
        parts += [_LENGTH.pack(section.size), section.to_pybytes()]
    return bytearray(b"".join(parts))


def loads(blob: bytes, aggregations: dict[str, tuple[CombineFn, str | None]]) -> ReducerState:
    """Read a blob of any readable version; refuse others with :class:`StateFormatError`."""
    blob = bytes(blob)
    if blob[:1] == b"\x80":
        return _loads_v0(blob)
    if len(blob) < _HEADER.size or blob[:8] != MAGIC:
        raise StateFormatError(
            "not a headwater state blob (no magic prefix); restart the query from a new checkpoint"
        )
    _, version = _HEADER.unpack_from(blob)
    if version not in READABLE_VERSIONS:
        raise _unreadable(version)
    pos, tables, view = _HEADER.size, [], memoryview(blob)
    for _ in range(3):
        (length,) = _LENGTH.unpack_from(blob, pos)
        pos += _LENGTH.size
        with pa.ipc.open_stream(pa.py_buffer(view[pos : pos + length])) as reader:
            tables.append(reader.read_all())
        pos += length
    windows, keys, queue = tables
    meta = {k.decode(): v.decode() for k, v in (windows.schema.metadata or {}).items()}
    cols = {}
    for name in windows.column_names:
        column = windows.column(name).combine_chunks()
        fn, field = _combiner_of(name, aggregations)
        if fn is not None:
            cols[name] = fn.accumulator_from_arrow(field, column)
        else:
            cols[name] = array_from_arrow(column)
        field_meta = windows.schema.field(name).metadata or {}
        if field_meta.get(_OBJECT) and cols[name].dtype != object:
            cols[name] = cols[name].astype(object)
    return ReducerState(
        keys=objects_from_arrow(keys.column("key")),
        cols=cols,
        queue=_table_to_frame(queue),
        watermark=int(meta[_META + "watermark"]),
        now=int(meta[_META + "now"]),
        dropped_count=int(meta[_META + "dropped_count"]),
    )


def _combiner_of(column: str, aggregations) -> tuple[CombineFn | None, str]:
    """The combiner that encodes ``column`` and its accumulator field, if it is
    an accumulator column of one of ``aggregations``."""
    parsed = split_acc_column(column)
    if parsed is None:
        return None, ""
    name, field = parsed
    entry = aggregations.get(name)
    return (entry[0] if entry is not None else None), field


def _unreadable(version: int) -> StateFormatError:
    from headwater import __version__

    lo, hi = min(READABLE_VERSIONS), max(READABLE_VERSIONS)
    return StateFormatError(
        f"state format version {version} is not readable by headwater {__version__} "
        f"(reads versions {lo}-{hi}); restart the query from a new checkpoint or "
        "upgrade headwater"
    )


def _loads_v0(blob: bytes) -> ReducerState:
    """Version 0: the pickled dict of headwater before this format."""
    try:
        state = pickle.loads(blob)
        cols = dict(state["cols"])
        if "ontime_data" not in cols:
            # Rule 1 (revised) tracks on-time data not emitted yet; version 0 did
            # not. Data pending in a window is taken as on time, which keeps the
            # old labelling (ON_TIME for the first pane after the end).
            cols["ontime_data"] = (cols["pending"] > 0) & ~cols["closed"]
        return ReducerState(
            keys=np.asarray(state["keys"], dtype=object),
            cols=cols,
            queue=state["queue"],
            watermark=int(state["watermark"]),
            now=int(state["now"]),
            dropped_count=int(state["dropped"]),
        )
    except (pickle.UnpicklingError, KeyError, TypeError, EOFError) as e:
        raise StateFormatError(f"unreadable version 0 (pickle) state blob: {e}") from e
