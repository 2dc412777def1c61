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

import numpy as np
import pandas as pd

from headwater.sql.maintain.changelog import CHANGE_COLUMNS, GROUP_COLUMNS, in_order
from headwater.sql.maintain.group_parts import AT, GroupParts, group_arrays, group_hashes

_NONE = np.zeros(0, dtype=np.int64)


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
