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
#: A row's part and its row there, while rows are matched with the fired groups.
_PART, _ROW = "__hw_part", "__hw_row"


@dataclass
class _Part:
    """Rows of groups, their hashes sorted (with the row of each) and which rows
    are still the groups' (a row taken away stays until the part is rewritten)."""

    frame: pd.DataFrame
    row_hashes: np.ndarray
    sorted_hashes: np.ndarray
    rows_by_hash: np.ndarray
    live: np.ndarray
    min_end: int

    @classmethod
    def of(cls, frame: pd.DataFrame, hashes: np.ndarray) -> _Part:
        frame = frame.reset_index(drop=True)
        order = np.argsort(hashes, kind="stable")
        ends = frame["__ge"].to_numpy(np.int64)
        return cls(frame, hashes, hashes[order], order, np.ones(len(frame), bool), ends.min())

    @property
    def size(self) -> int:
        return int(self.live.sum())

    def candidates(self, hashes: np.ndarray) -> np.ndarray:
        """The live rows whose group hash is one of ``hashes`` (equal hashes of
        other groups included: the caller matches the group columns)."""
        left = np.searchsorted(self.sorted_hashes, hashes, "left")
        count = np.searchsorted(self.sorted_hashes, hashes, "right") - left
        if not count.any():
            return np.zeros(0, dtype=np.int64)
        first = np.repeat(left, count)
        nth = np.arange(len(first)) - np.repeat(np.cumsum(count) - count, count)
        rows = np.unique(self.rows_by_hash[first + nth])
        return rows[self.live[rows]]

    def kept(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The live rows and their hashes."""
        if self.live.all():
            return self.frame, self.row_hashes
        return self.frame[self.live], self.row_hashes[self.live]


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

    def take(self, fired: pd.DataFrame, hashes: np.ndarray) -> pd.DataFrame | None:
        """The rows of the ``fired`` groups (GROUP_COLUMNS + AT), each with the
        group's AT, taken out of the parts. None when no part has any."""
        group = list(GROUP_COLUMNS)
        picks = [(i, part.candidates(hashes)) for i, part in enumerate(self.parts)]
        picks = [(i, rows) for i, rows in picks if len(rows)]
        if not picks:
            return None
        some = pd.concat([self.parts[i].frame.iloc[rows] for i, rows in picks], ignore_index=True)
        some[_PART] = np.repeat([i for i, _ in picks], [len(rows) for _, rows in picks])
        some[_ROW] = np.concatenate([rows for _, rows in picks])
        marked = some.merge(fired[[*group, AT]], how="inner", on=group)
        part_of, row = marked[_PART].to_numpy(np.int64), marked[_ROW].to_numpy(np.int64)
        for i, _ in picks:
            self.parts[i].live[row[part_of == i]] = False
        self._compact()
        return marked.drop(columns=[_PART, _ROW]) if len(marked) else None

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
                part.live &= part.frame["__ge"].to_numpy(np.int64) > horizon
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
        new = results[[*group, *self.columns, AT]]
        at_new = new[AT].to_numpy(np.int64)
        has = np.zeros(n, dtype=bool)
        has[at_new] = True
        had = np.zeros(n, dtype=bool)
        at_old = np.zeros(0, dtype=np.int64)
        old = self.materialized.take(fired, hashes)
        if old is None:
            old = new.iloc[:0]
        else:
            at_old = old[AT].to_numpy(np.int64)
            had[at_old] = True
        same = had & has
        if same.any():
            both = np.flatnonzero(same)
            o = old.set_index(AT).reindex(both)
            w = new.set_index(AT).reindex(both)
            equal = np.ones(len(both), dtype=bool)
            for c in self.columns:
                a, b = o[c], w[c]
                equal &= ((a == b).fillna(False) | (a.isna() & b.isna())).to_numpy(bool)
            same[both[~equal]] = False
        undo, add = had & ~same, has & ~same
        ver = np.zeros(n, dtype=np.int64)
        marked = self.next_versions.take(fired, hashes)
        if marked is not None:
            ver[marked[AT].to_numpy(np.int64)] = marked["ver"].to_numpy(np.int64)
        self.materialized.add(new.drop(columns=[AT]), hashes[at_new])
        following = ver + undo + add
        counted = following > 0
        if counted.any():
            bumped = fired.loc[counted, group].assign(ver=following[counted])
            self.next_versions.add(bumped, hashes[counted])
        if not (undo.any() or add.any()):
            return self._empty()
        withdrawn = old[undo[at_old]]
        withdrawn = withdrawn.assign(undo=True, ver=ver[withdrawn[AT].to_numpy(np.int64)])
        added = new[add[at_new]]
        at = added[AT].to_numpy(np.int64)
        added = added.assign(undo=False, ver=ver[at] + undo[at])
        change = pd.concat([withdrawn, added], ignore_index=True) if len(withdrawn) else added
        change = change[[*GROUP_COLUMNS, *self.columns, "undo", "ver"]]
        change.insert(len(change.columns) - 1, "ptime", np.int64(ptime))
        return in_order(change)

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``."""
        self.materialized.expire(horizon)
        self.next_versions.expire(horizon)
