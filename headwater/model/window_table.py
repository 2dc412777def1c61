"""Storage of a shard's live windows: one columnar table, one row per (key, window).

The reducer (:mod:`headwater.model.reducer`) decides what happens to windows;
this module only stores them, as numpy columns of equal length, with a
dictionary of keys (rows hold int64 key codes) and a hash index of the
(key, window) rows. It knows nothing of triggers or panes beyond the columns
they need.

The column names are a contract: the versioned state format
(:mod:`headwater.model.state`) stores them, and the trigger tree
(:mod:`headwater.model.triggers`) reads its own columns under
:data:`TRIGGER_PREFIX`. They are spelled only here; checkpoints written by
earlier releases hold the same names, so they must never change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd

from headwater.model.combiners import CombineFn
from headwater.model.triggers import Field as TriggerField

#: Output name -> ``(combine_fn, input column)`` (``None``: the element value).
Aggregations = Mapping[str, tuple[CombineFn, str | None]]

# ------------------------------------------------------------ column names
#: Prefix of the trigger state columns: ``t:<path>`` (the trigger tree is
#: handed the columns and this prefix).
TRIGGER_PREFIX = "t:"
_ACC_PREFIX = "acc:"
_LAST_PREFIX = "last:"
#: The metadata of a window's last pane kept for its retraction, besides its outputs.
LAST_PANE_FIELDS = ("timestamp", "pane_index", "nonspec_index", "timing")
#: the columns that name a window (its key and bounds), which its row is looked up by
_WINDOW_COLUMNS = frozenset({"key", "start", "end"})

#: Window bookkeeping columns: dtype and the value of a new window.
_BOOKKEEPING: dict[str, tuple[type, object]] = {
    "key": (np.int64, -1),  # a code into the key dictionary
    "start": (np.int64, 0),
    "end": (np.int64, 0),
    "pending": (np.int64, 0),  # elements not emitted by a pane yet
    "closed": (bool, False),  # the trigger finished
    "eow_timer": (bool, False),  # an end-of-window firing is ahead
    "ontime_data": (bool, False),  # unemitted data arrived before the end passed
    "hold": (np.int64, 0),  # the output timestamp, if has_hold
    "has_hold": (bool, False),
    "pane_index": (np.int64, 0),
    "nonspec_index": (np.int64, 0),
    "has_last": (bool, False),  # the last:* columns hold a pane to retract
}


def trigger_column(path: str) -> str:
    """The column of trigger state field ``path`` (a path in the trigger tree)."""
    return TRIGGER_PREFIX + path


def acc_column(aggregation: str, field: str) -> str:
    """The column of accumulator ``field`` of output ``aggregation``."""
    return f"{_ACC_PREFIX}{aggregation}:{field}"


def split_acc_column(column: str) -> tuple[str, str] | None:
    """``(aggregation, field)`` of an accumulator column; ``None`` for other columns."""
    if not column.startswith(_ACC_PREFIX):
        return None
    _, aggregation, field = column.split(":", 2)
    return aggregation, field


def last_column(name: str) -> str:
    """The column of the last pane's output ``name`` or metadata (:data:`LAST_PANE_FIELDS`)."""
    return _LAST_PREFIX + name


# ------------------------------------------------------------------ table
class WindowTable:
    """The live windows of a shard: columns ``cols``, key dictionary ``keys``.

    Rows have no identity beyond their position: :meth:`append` adds rows at
    the end, :meth:`keep` removes rows and renumbers the rest.
    """

    def __init__(
        self,
        trigger_fields: Mapping[str, TriggerField],
        aggregations: Aggregations,
        *,
        retracting: bool = False,
    ):
        #: Whether the last pane of every window is kept (to retract it): only the
        #: retracting mode reads those columns, so the others do not store them.
        self.retracting = retracting
        self._defaults: dict[str, tuple[type, object]] = dict(_BOOKKEEPING)
        for path, f in trigger_fields.items():
            self._defaults[trigger_column(path)] = (f.dtype, f.default)
        self._combiners = {name: fn for name, (fn, _) in aggregations.items()}
        #: Output name -> accumulator field -> column.
        self.acc_columns: dict[str, dict[str, str]] = {
            name: {f: acc_column(name, f) for f in fn.create(0)}
            for name, fn in self._combiners.items()
        }
        self.keys = KeyDictionary()
        self.cols = self.empty(0)
        #: the window hash of each row, in parts (built at the first lookup)
        self._index: IndexParts | None = None
        #: column -> an array with room to grow, whose first rows ``cols`` views
        self._backing: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.cols["key"])

    def empty(self, n: int) -> dict[str, np.ndarray]:
        """All columns of ``n`` new windows (the table's layout and column order)."""
        cols = {
            name: np.full(n, default, dtype=dtype)
            for name, (dtype, default) in self._defaults.items()
        }
        cols.update(self.fresh_accumulators(n))
        if self.retracting:
            for name in self._combiners:
                cols[last_column(name)] = np.full(n, None, dtype=object)
            for name in LAST_PANE_FIELDS:
                cols[last_column(name)] = np.zeros(n, dtype=np.int64)
        return cols

    def fresh_accumulators(self, n: int) -> dict[str, np.ndarray]:
        """Empty accumulators of every output for ``n`` windows, by column."""
        out = {}
        for name, fn in self._combiners.items():
            for field, arr in fn.create(n).items():
                out[acc_column(name, field)] = arr
        return out

    def load(self, keys: np.ndarray, cols: Mapping[str, np.ndarray]) -> None:
        """Take the keys and columns of a snapshot; columns it lacks (an older
        state format) get their defaults, columns it has beyond them are dropped."""
        names = list(self.empty(0))
        n = len(cols["key"])
        defaults = self.empty(n) if any(c not in cols for c in names) else {}
        self.cols = {c: cols[c] if c in cols else defaults[c] for c in names}
        self.keys = KeyDictionary(keys)
        self._index = None

    # ------------------------------------------------------------------ rows
    def append(self, new: dict[str, np.ndarray]) -> np.ndarray:
        """Append rows (missing columns get defaults); returns their row numbers."""
        n = len(next(iter(new.values())))
        base = len(self)
        full = self.empty(n)
        full.update(new)
        for name in self.cols:
            self.cols[name] = self._grown(name, full[name])
        if self._index is not None:  # the new rows' windows: a part of their own
            self._index.append(pd.Index(_window_hash(full["key"], full["start"], full["end"])))
        return np.arange(base, base + n)

    def _grown(self, name: str, values: np.ndarray) -> np.ndarray:
        """:func:`concat` of column ``name`` and ``values``, written into the room
        of the column's backing array when the column is still its view and the
        dtype is the same (a step's new windows copy no rows kept; the backing
        doubles when full)."""
        current = self.cols[name]
        backing = self._backing.get(name)
        end = len(current) + len(values)
        dtype = object if object in (current.dtype, values.dtype) else None
        dtype = dtype or np.result_type(current.dtype, values.dtype)
        fits = backing is not None and len(backing) >= end and backing.dtype == dtype
        if not (fits and current.base is backing and current.ndim == 1):
            backing = np.empty(max(2 * end, 16), dtype=dtype)
            backing[: len(current)] = current
            self._backing[name] = backing
        backing[len(current) : end] = values
        return backing[:end]

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where ``mask`` is true."""
        for name in self.cols:
            self.cols[name] = self.cols[name][mask]
        self._index = None

    def set(self, name: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Write ``values`` into column ``name``, widening its dtype if they need it."""
        if name in _WINDOW_COLUMNS:
            self._index = None
        arr = self.cols[name]
        values = np.asarray(values)
        if arr.dtype != object and values.dtype != arr.dtype:
            wider = np.result_type(arr.dtype, values.dtype)
            if wider != arr.dtype:
                arr = self.cols[name] = arr.astype(wider)
        arr[rows] = values

    def accumulators(self, name: str, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The accumulator of output ``name`` at ``rows``, by field."""
        return {f: self.cols[column][rows] for f, column in self.acc_columns[name].items()}

    def set_accumulators(self, name: str, rows: np.ndarray, acc: Mapping[str, np.ndarray]) -> None:
        """Write an accumulator of output ``name`` (by field) into ``rows``."""
        for f, arr in acc.items():
            self.set(acc_column(name, f), rows, arr)

    def reset_accumulators(self, rows: np.ndarray) -> None:
        """Empty the accumulators of every output at ``rows``."""
        for column, arr in self.fresh_accumulators(len(rows)).items():
            self.set(column, rows, arr)

    # ---------------------------------------------------------------- lookup
    def lookup(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Row of each (key, window), -1 if absent: a hash index on one int64."""
        if len(self) == 0:
            return np.full(len(key), -1, dtype=np.int64)
        c = self.cols
        if self._index is None:
            self._index = IndexParts(pd.Index(_window_hash(c["key"], c["start"], c["end"])))
        if self._index.unique:
            # a window hashed alike in an earlier part is caught as a mismatch below
            rows = self._index.positions(pd.Index(_window_hash(key, start, end)))
            found = rows >= 0
            r = rows[found]
            if (
                (c["key"][r] == key[found])
                & (c["start"][r] == start[found])
                & (c["end"][r] == end[found])
            ).all():
                return rows
        # A hash collision (astronomically rare): fall back to an exact index.
        exact = pd.MultiIndex.from_arrays([c["key"], c["start"], c["end"]])
        return exact.get_indexer(pd.MultiIndex.from_arrays([key, start, end]))

    def encode_keys(self, keys) -> np.ndarray:
        """The int64 code of each key, adding unseen keys to the dictionary."""
        return self.keys.encode(keys)

    def decode_keys(self, codes: np.ndarray) -> np.ndarray:
        """The keys of ``codes`` (an object array)."""
        return self.keys.decode(codes)


class IndexParts:
    """Values in consecutive parts, each a hashed ``pd.Index``: appended values are a
    part of their own, and the last two parts merge while the older is at most twice
    the newer, as the digits of a binary counter carry. So an append hashes its own
    values and each value is rehashed a logarithmic number of times in all, where one
    index of every value rebuilt at each append cost what all the values cost."""

    def __init__(self, values: pd.Index | None = None) -> None:
        self._parts: list[pd.Index] = [] if values is None or not len(values) else [values]

    @property
    def depth(self) -> int:
        """How many parts (logarithmic in the values appended)."""
        return len(self._parts)

    @property
    def unique(self) -> bool:
        """Whether no part holds a value twice (what ``positions`` needs)."""
        return all(part.is_unique for part in self._parts)

    def positions(self, values: pd.Index) -> np.ndarray:
        """Each value's position among all the values appended (in the first part
        that has it), -1 where absent."""
        out = np.full(len(values), -1, dtype=np.int64)
        todo = np.arange(len(values))
        start = 0
        for part in self._parts:
            if not len(todo):
                break
            found = part.get_indexer(values[todo] if len(todo) < len(values) else values)
            hit = found >= 0
            out[todo[hit]] = found[hit] + start
            todo = todo[~hit]
            start += len(part)
        return out

    def append(self, values: pd.Index) -> None:
        """Add ``values`` after the others (their positions follow on)."""
        self._parts.append(values)
        while len(self._parts) > 1 and len(self._parts[-2]) <= 2 * len(self._parts[-1]):
            older, newer = self._parts[-2:]
            self._parts[-2:] = [older.append(newer)]


class KeyDictionary:
    """The keys of a shard, coded 0, 1, ... in the order they first came.

    The codes are looked up in parts (consecutive ranges of codes, each a hashed
    ``pd.Index``): a step's new keys are a part of their own, and the last two
    parts merge while the older is at most twice the newer, as the digits of a
    binary counter carry. So a step hashes its own keys into a logarithmic number
    of parts and each key is rehashed a logarithmic number of times in all, where
    one index of every key rebuilt at each step with new keys cost what all the
    keys cost. Keys compare as ``pd.Index`` compares them (NaN equal to NaN)."""

    def __init__(self, keys=None) -> None:
        index = pd.Index([] if keys is None else keys, dtype=object)
        self._values = index.to_numpy(object).copy()
        self._size = len(index)
        self._parts = IndexParts(index)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[object]:
        return iter(self._values[: self._size])

    def codes(self, keys) -> np.ndarray:
        """The code of each key, -1 for a key not here."""
        return self._parts.positions(_as_index(keys))

    def encode(self, keys) -> np.ndarray:
        """The code of each key, adding the keys not here (in order of first sight)."""
        keys = _as_index(keys)
        codes = self.codes(keys)
        missing = codes < 0
        if missing.any():
            absent = keys[missing]
            new = absent.unique()
            codes[missing] = new.get_indexer(absent) + self._size
            self._append(new)
        return codes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The keys of ``codes`` (an object array)."""
        return self._values[: self._size][codes]

    def subset(self, codes: np.ndarray) -> KeyDictionary:
        """A dictionary of the keys of ``codes`` only, coded in that order."""
        return KeyDictionary(self.decode(codes))

    def _append(self, new: pd.Index) -> None:
        end = self._size + len(new)
        if end > len(self._values):
            grown = np.empty(max(end, 2 * len(self._values)), dtype=object)
            grown[: self._size] = self._values[: self._size]
            self._values = grown
        self._values[self._size : end] = new.to_numpy(object)
        self._size = end
        self._parts.append(pd.Index(new, dtype=object))


def _as_index(keys) -> pd.Index:
    if isinstance(keys, pd.Index):
        return keys
    return pd.Index(np.asarray(keys, dtype=object), dtype=object)


def _window_hash(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = key.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h ^= start.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
        h = (h << np.uint64(31)) | (h >> np.uint64(33))
        h ^= end.astype(np.uint64) * np.uint64(0x165667B19E3779F9)
    return h.view(np.int64)


def group_ids(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids of rows by equal ``columns`` (one lexsort), and the
    first row of each group."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    boundary = np.zeros(n, dtype=bool)
    boundary[0] = True
    for col in columns:
        sc = col[order]
        boundary[1:] |= sc[1:] != sc[:-1]
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(boundary) - 1
    return ids, order[boundary]


def concat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` then ``b``; an object column stays object (numpy would nest lists)."""
    if a.dtype == object or b.dtype == object:
        out = np.empty(len(a) + len(b), dtype=object)
        out[: len(a)] = a
        out[len(a) :] = b
        return out
    return np.concatenate([a, b])
