"""Per-group state that a step touches by its own groups: rows kept in parts,
looked up by the hash of their group (the model's key and window).

A query without a window that closes (an unwindowed key, a day's window) keeps its
groups for the whole run; a step that scanned or copied all of them would cost
what every group ever seen costs. :class:`GroupParts` makes it cost what the
step's own groups cost, times the logarithm of the number kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: The position of a fired group in a step's panes: results are matched by it.
AT = "__hw_at"


def mix64(x: np.ndarray) -> np.ndarray:
    """``x`` (uint64) through splitmix64's finalizer: every input bit moves every
    output bit, so that hashes combined by xor stay spread."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def combine_hash(h: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """The hash ``h`` combined with an integral column (as int64)."""
    return mix64(h ^ mix64(numbers.astype(np.int64, copy=False).view(np.uint64)))


def group_hashes(frame: pd.DataFrame) -> np.ndarray:
    """A 64-bit hash of each row's group (``GROUP_COLUMNS``): equal groups, equal
    hashes, so a membership test need compare only the rows whose hash matches.
    The key text is hashed by pandas, the window's ends mixed in as numbers."""
    h = pd.util.hash_array(frame["__gk"].to_numpy(object), categorize=False)
    h = combine_hash(h, frame["__gs"].to_numpy(np.int64))
    return combine_hash(h, frame["__ge"].to_numpy(np.int64))


@dataclass
class _Part:
    """Rows of groups, their hashes sorted (with the row of each), which rows are
    still the groups' (a row taken away stays until the part is rewritten), and the
    group columns as arrays, to tell groups that share a hash apart."""

    frame: pd.DataFrame
    row_hashes: np.ndarray
    sorted_hashes: np.ndarray
    rows_by_hash: np.ndarray
    live: np.ndarray
    min_end: int
    groups: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, frame: pd.DataFrame, hashes: np.ndarray) -> _Part:
        frame = frame.reset_index(drop=True)
        order = np.argsort(hashes, kind="stable")
        groups = group_arrays(frame)
        live = np.ones(len(frame), bool)
        return cls(frame, hashes, hashes[order], order, live, groups[2].min(), groups)

    @property
    def size(self) -> int:
        return int(self.live.sum())

    def matches(self, hashes: np.ndarray, groups: tuple[np.ndarray, ...]):
        """The live rows of the groups ``groups`` (arrays of GROUP_COLUMNS, their
        ``hashes``): the position of each matched group, and its row here."""
        left = np.searchsorted(self.sorted_hashes, hashes, "left")
        count = np.searchsorted(self.sorted_hashes, hashes, "right") - left
        if not count.any():
            return _NONE, _NONE
        at = np.repeat(np.arange(len(hashes)), count)
        first = np.repeat(left, count)
        nth = np.arange(len(first)) - np.repeat(np.cumsum(count) - count, count)
        rows = self.rows_by_hash[first + nth]
        ok = self.live[rows]
        for mine, theirs in zip(self.groups, groups, strict=True):
            ok &= np.asarray(mine[rows] == theirs[at], dtype=bool)
        return at[ok], rows[ok]

    def kept(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The live rows and their hashes."""
        if self.live.all():
            return self.frame, self.row_hashes
        return self.frame[self.live], self.row_hashes[self.live]


_NONE = np.zeros(0, dtype=np.int64)


def group_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """The group columns (GROUP_COLUMNS) of ``frame`` as arrays: key text, start, end."""
    return (
        frame["__gk"].to_numpy(object),
        frame["__gs"].to_numpy(np.int64),
        frame["__ge"].to_numpy(np.int64),
    )


class GroupParts:
    """Rows of groups, in parts: a step's new rows are a part of their own, the
    rows they replace are marked gone in theirs, and parts of similar size merge
    (dropping gone rows), as the digits of a binary counter carry. A step looks
    groups up by hash in each part (a logarithmic number of parts), so it touches
    its own groups only; a row is copied a logarithmic number of times in all.
    The live rows keep the order they were added in."""

    def __init__(self, frame: pd.DataFrame | None = None) -> None:
        self.parts: list[_Part] = []
        if frame is not None and len(frame):
            self.add(frame)

    def __len__(self) -> int:
        return sum(p.size for p in self.parts)

    def frame(self) -> pd.DataFrame | None:
        """Every group's row (None when there never was one): the snapshot's form."""
        if not self.parts:
            return None
        kept = [p.kept()[0] for p in self.parts]
        return pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]

    def take(
        self, groups: tuple[np.ndarray, ...], at_fired: np.ndarray, hashes: np.ndarray
    ) -> pd.DataFrame | None:
        """The rows of the fired groups (``groups``: their GROUP_COLUMNS as arrays,
        ``at_fired`` their AT, ``hashes`` theirs), each with its group's AT, taken
        out of the parts. None when no part has any."""
        taken = self.pop(groups, hashes)
        if taken is None:
            return None
        some, at, _ = taken
        some[AT] = at_fired[at]
        return some

    def find(
        self, groups: tuple[np.ndarray, ...], hashes: np.ndarray
    ) -> tuple[pd.DataFrame, np.ndarray] | None:
        """The rows of the groups ``groups`` (GROUP_COLUMNS as arrays, ``hashes``
        theirs), left in place, and the position in ``groups`` of each row's group;
        None when no part has any."""
        found = self._gathered(groups, hashes, remove=False)
        return None if found is None else found[:2]

    def pop(
        self, groups: tuple[np.ndarray, ...], hashes: np.ndarray
    ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray] | None:
        """The rows of the groups ``groups`` (GROUP_COLUMNS as arrays, ``hashes``
        theirs) taken out of the parts: the rows, the position in ``groups`` of each
        row's group, and each row's hash. None when no part has any."""
        taken = self._gathered(groups, hashes, remove=True)
        if taken is not None:
            self._compact()
        return taken

    def _gathered(
        self, groups: tuple[np.ndarray, ...], hashes: np.ndarray, remove: bool
    ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray] | None:
        """The rows of ``groups`` in every part, their groups' positions and their
        hashes (marked gone if ``remove``); None when no part has any."""
        frames, ats, row_hashes = [], [], []
        for part in self.parts:
            at, rows = part.matches(hashes, groups)
            if len(rows):
                if remove:
                    part.live[rows] = False
                frames.append(part.frame.take(rows))
                ats.append(at)
                row_hashes.append(part.row_hashes[rows])
        if not frames:
            return None
        some = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        return some.reset_index(drop=True), np.concatenate(ats), np.concatenate(row_hashes)

    def pop_keys(self, keys: np.ndarray) -> pd.DataFrame | None:
        """The rows whose key (``__gk``) is one of ``keys``, in the order they were
        added, taken out of the parts; None when no part has any."""
        frames = []
        for part in self.parts:
            hit = part.live & pd.Series(part.groups[0]).isin(keys).to_numpy(bool)
            if hit.any():
                part.live &= ~hit
                frames.append(part.frame[hit])
        if not frames:
            return None
        self._compact()
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    def add(self, frame: pd.DataFrame, hashes: np.ndarray | None = None) -> None:
        """New rows (``hashes``: their groups', when known)."""
        if len(frame):
            hashes = group_hashes(frame) if hashes is None else hashes
            self.parts.append(_Part.of(frame, hashes))
            self._compact()

    def expire(self, horizon: int) -> None:
        """Forget the rows of the windows that end at or before ``horizon``."""
        for part in self.parts:
            if part.min_end <= horizon:
                part.live &= part.groups[2] > horizon
        self._compact()

    def _compact(self) -> None:
        """Rewrite a part mostly gone; merge the last two while the older is not
        more than twice the newer."""
        parts = [p if p.size * 2 > len(p.live) else _rewritten([p]) for p in self.parts]
        parts = [p for p in parts if p is not None]
        while len(parts) > 1 and parts[-2].size <= 2 * parts[-1].size:
            merged = _rewritten(parts[-2:])
            parts[-2:] = [merged] if merged is not None else []
        self.parts = parts


def _rewritten(parts: list[_Part]) -> _Part | None:
    """One part of the live rows of ``parts`` (None when none is left)."""
    kept = [p.kept() for p in parts]
    kept = [(f, h) for f, h in kept if len(f)]
    if not kept:
        return None
    if len(kept) == 1:
        return _Part.of(*kept[0])
    frame = pd.concat([f for f, _ in kept], ignore_index=True)
    return _Part.of(frame, np.concatenate([h for _, h in kept]))
