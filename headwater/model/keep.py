"""Which of a group's rows its state must keep: all, or the first ``n`` by an order.

A group that holds its rows (one ``ToList`` per column) for a query that only
ever shows its first ``n`` rows by some order (SQL's ``ROW_NUMBER() OVER
(PARTITION BY key ORDER BY ...) <= n``, a deduplication or a Top-N) never
needs a row that ``n`` others precede: whatever arrives later, those ``n``
still precede it. :class:`TopRows` drops such rows after each step, so a key's
state stays at about ``n`` rows instead of growing with every row of the key.

Kept besides the first ``n``: every row tied with the ``n``-th (an order with
ties ranks them in any order, so each could be among the first ``n``) and
every row with a NULL or NaN in an order column (NULLs sort first or last by
the engine's rule; kept, the rule need not be known). So every row that could
be among the first ``n`` over all rows is kept, with every row that precedes
it, and the rows kept stay in their order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwater.model.arrays import sorts_together
from headwater.model.lists import flat_lists, split_list

__all__ = ["TopRows"]


@dataclass(frozen=True)
class TopRows:
    """Keep the rows that fewer than ``n`` rows of their group precede by ``order``:
    ``(column, descending)`` pairs, each column the name of an aggregation whose
    accumulator is the group's list of that column's values."""

    n: int
    order: tuple[tuple[str, bool], ...]

    def over(self, lists: np.ndarray) -> np.ndarray:
        """The places of the groups of more than ``n`` rows (``lists``: one column's
        list per group), the only ones that can lose rows."""
        return np.flatnonzero(np.fromiter(map(len, lists), np.int64, count=len(lists)) > self.n)

    def pruned(self, lists: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The groups that lose rows (their places in ``lists``: each column's list per
        group, every column of the rows) and each column's lists of what they keep."""
        sizes = np.fromiter(map(len, lists[self.order[0][0]]), np.int64)
        group = np.repeat(np.arange(len(sizes)), sizes)
        kept = self.kept({c: lists[c] for c, _ in self.order}, group)
        if kept is None:
            return np.zeros(0, dtype=np.int64), {}
        left = np.bincount(group[kept], minlength=len(sizes))
        lost = left < sizes
        take, left = kept[lost[group]], left[lost]
        kept_of = {name: tuple(flat_lists(lists[name][lost])[take].tolist()) for name in lists}
        out = {name: split_list(values, left) for name, values in kept_of.items()}
        return np.flatnonzero(lost), out

    def kept(self, lists: dict[str, np.ndarray], group: np.ndarray) -> np.ndarray | None:
        """Over the groups' rows one after another (``lists``: each order column's
        list per group; ``group``: each row's group), which to keep; None when the
        values do not sort (all kept)."""
        keys, known = [], np.ones(len(group), dtype=bool)
        for column, descending in self.order:
            values = flat_lists(lists[column])
            if not sorts_together(values):
                return None
            try:
                codes, _ = pd.factorize(values, sort=True)
            except TypeError:  # values of types that do not compare
                return None
            known &= codes >= 0
            keys.append(-codes if descending else codes)
        ranked = np.flatnonzero(known)
        # by group, then the order's columns (np.lexsort: the last key first)
        order = ranked[np.lexsort([*(k[ranked] for k in keys[::-1]), group[ranked]])]
        return self._within(order, group, keys, known)

    def _within(self, order, group, keys, known) -> np.ndarray:
        """Keep each ranked row that fewer than ``n`` rows of its group precede: the
        place of the first row of its tie (in ``order``) in its group's run."""
        g = group[order]
        new_group = np.r_[True, g[1:] != g[:-1]]
        new_tie = new_group.copy()
        for k in keys:
            v = k[order]
            new_tie[1:] |= v[1:] != v[:-1]
        place = np.arange(len(order))
        group_start = np.maximum.accumulate(np.where(new_group, place, 0))
        tie_start = np.maximum.accumulate(np.where(new_tie, place, 0))
        keep = ~known  # a NULL in an order column: kept
        keep[order[tie_start - group_start < self.n]] = True
        return keep
