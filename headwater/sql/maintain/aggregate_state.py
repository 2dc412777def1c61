"""The changelog state of the windowed-aggregate fast path: what each group
materialized last and its next ``ver``.

A group of a plain windowed aggregate (GROUP BY columns, window) has at most
one result row, so the multiset difference of
:class:`~headwater.sql.maintain.changelog.Materializer` reduces to a few merges per step
over the groups that fired. The state is kept in :class:`GroupParts`, so that a step
costs what its fired groups cost, not what every group ever seen costs (an unwindowed
key, or a day's window, keeps its groups for the whole run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwater.sql.maintain.changelog import (
    CHANGE_COLUMNS,
    GROUP_COLUMNS,
    group_hashes,
    in_order,
)

#: The position of a fired group in a step's panes: results are matched by it.
AT = "__hw_at"


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
    """One row per group, in parts: a step's new rows are a part of their own, the
    rows they replace are marked gone in theirs, and parts of similar size merge
    (dropping gone rows), as the digits of a binary counter carry. A step looks
    groups up by hash in each part (a logarithmic number of parts), so it touches
    its own groups only; a row is copied a logarithmic number of times in all."""

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
        frames, ats = [], []
        for part in self.parts:
            at, rows = part.matches(hashes, groups)
            if len(rows):
                part.live[rows] = False
                frames.append(part.frame.take(rows))
                ats.append(at_fired[at])
        if not frames:
            return None
        self._compact()
        some = pd.concat(frames, ignore_index=True)
        some[AT] = np.concatenate(ats)
        return some

    def add(self, frame: pd.DataFrame, hashes: np.ndarray | None = None) -> None:
        """New rows, of groups that have none here (``take`` them first)."""
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


class GroupRows:
    """What each group materialized last and its next ``ver``: the changelog of a
    windowed aggregate, whose groups have at most ONE result row each.

    The same changelog as :class:`~headwater.sql.maintain.changelog.Materializer` (a
    fired group whose row changed withdraws the old row, then adds the new; an
    unchanged one adds nothing; ``ver`` continues per group), computed with a
    few merges per step over the fired groups instead of a multiset difference
    over every group.
    """

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)
        #: the materialized row of every group that has one (GROUP_COLUMNS + columns)
        self.materialized = GroupParts()
        #: the next ``ver`` of every group that has changed (GROUP_COLUMNS + ver)
        self.next_versions = GroupParts()

    @property
    def rows(self) -> pd.DataFrame | None:
        """Every group's materialized row, as one frame (the snapshot's form)."""
        return self.materialized.frame()

    @property
    def versions(self) -> pd.DataFrame | None:
        """Every changed group's next ``ver``, as one frame (the snapshot's form)."""
        return self.next_versions.frame()

    def _empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS])

    def apply(self, fired: pd.DataFrame, results: pd.DataFrame, ptime: int) -> pd.DataFrame:
        """The changelog rows of one firing: ``fired`` groups (GROUP_COLUMNS, unique)
        and their result rows (GROUP_COLUMNS + the query's columns; none for a
        group HAVING filtered out). With a column ``__hw_at`` in both (the
        position of the group in ``fired``), results are matched by it."""
        if not len(fired):
            return self._empty()
        group = list(GROUP_COLUMNS)
        n = len(fired)
        fired = fired.reset_index(drop=True)
        if AT not in fired.columns or AT not in results.columns:
            fired = fired[group].assign(**{AT: np.arange(n)})
            results = results[[*group, *self.columns]].merge(fired, on=group)
        hashes = group_hashes(fired)
        new = results[[*group, *self.columns]]
        at_new = results[AT].to_numpy(np.int64)
        groups, at_fired = group_arrays(fired), fired[AT].to_numpy(np.int64)
        old = self.materialized.take(groups, at_fired, hashes)
        at_old = _NONE if old is None else old[AT].to_numpy(np.int64)
        had, has = _marked(n, at_old), _marked(n, at_new)
        same = self._same(old, at_old, new, at_new, had & has)
        undo, add = had & ~same, has & ~same
        ver = np.zeros(n, dtype=np.int64)
        marked = self.next_versions.take(groups, at_fired, hashes)
        if marked is not None:
            ver[marked[AT].to_numpy(np.int64)] = marked["ver"].to_numpy(np.int64)
        self.materialized.add(new, hashes[at_new])
        following = ver + undo + add
        counted = following > 0
        if counted.any():
            bumped = {c: a[counted] for c, a in zip(group, groups, strict=True)}
            bumped["ver"] = following[counted]
            self.next_versions.add(pd.DataFrame(bumped), hashes[counted])
        if not (undo.any() or add.any()):
            return self._empty()
        added = at_new[add[at_new]]
        change = new[add[at_new]].assign(undo=False, ver=ver[added] + undo[added])
        gone = at_old[undo[at_old]]
        if len(gone):
            withdrawn = old[undo[at_old]][[*group, *self.columns]]
            change = pd.concat(
                [withdrawn.assign(undo=True, ver=ver[gone]), change], ignore_index=True
            )
        change.insert(len(change.columns) - 1, "ptime", np.int64(ptime))
        return in_order(change)

    def _same(self, old, at_old: np.ndarray, new, at_new: np.ndarray, both: np.ndarray):
        """Which of the fired groups with an old and a new row (``both``) kept their
        row: equal in every column of the query (NULL equal to NULL)."""
        if not both.any():
            return both
        n, which = len(both), np.flatnonzero(both)
        io, iw = _rows_of(n, at_old)[which], _rows_of(n, at_new)[which]
        equal = np.ones(len(which), dtype=bool)
        for c in self.columns:
            equal &= _same_values(old[c].to_numpy()[io], new[c].to_numpy()[iw])
        same = np.zeros(n, dtype=bool)
        same[which[equal]] = True
        return same

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``."""
        self.materialized.expire(horizon)
        self.next_versions.expire(horizon)


def _marked(n: int, at: np.ndarray) -> np.ndarray:
    """Which of ``n`` positions are in ``at``."""
    out = np.zeros(n, dtype=bool)
    out[at] = True
    return out


def _rows_of(n: int, at: np.ndarray) -> np.ndarray:
    """The row of each of ``n`` positions in a frame whose rows are at ``at``."""
    out = np.zeros(n, dtype=np.int64)
    out[at] = np.arange(len(at))
    return out


def _same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise equality, NULL (None, NaN, NaT, NA) equal to NULL; values that
    do not compare as scalars (lists, NA) are compared as pandas compares them."""
    try:
        with np.errstate(invalid="ignore"):
            equal = np.asarray(a == b, dtype=bool)
    except (TypeError, ValueError):
        equal = None
    if equal is None or equal.shape != a.shape:  # not compared element-wise
        equal = (pd.Series(a) == pd.Series(b)).fillna(False).to_numpy(bool)
    return equal | (pd.isna(a) & pd.isna(b))
