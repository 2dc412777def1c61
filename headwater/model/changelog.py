"""Consuming a changelog of panes: re-aggregation with retractions.

A retracting pipeline emits each refinement as "withdraw the old pane, add the
new one". A consumer that rolls panes up further (per team over all windows,
say) applies that changelog to its own accumulators: a combiner with an
inverse (``CombineFn.subtract``) takes a retraction out in O(1) instead of
recomputing the group from scratch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.model.combiners import CombineFn
from headwater.model.window_table import group_ids


def rollup(changelog: pd.DataFrame, by: list[str], column: str, fn: CombineFn) -> pd.DataFrame:
    """Fold the ``column`` of a pane changelog into one value per ``by`` group.

    Panes add their value with ``fn``; retraction rows (``is_retraction``)
    subtract theirs with ``fn.subtract``, so the result equals aggregating the
    latest pane of every window. Vectorized: one grouped add of the panes, one
    of the retractions, one subtraction.
    """
    if not fn.has_inverse:
        raise TypeError(f"{fn!r} has no inverse: a changelog with retractions needs one")
    if changelog.empty:
        return pd.DataFrame(columns=[*by, column])
    groups, first = group_ids(*(pd.factorize(changelog[c])[0] for c in by))
    n = len(first)
    retraction = changelog["is_retraction"].to_numpy(bool)
    values = changelog[column].to_numpy()
    added = fn.add(values[~retraction], groups[~retraction], n)
    taken = fn.add(values[retraction], groups[retraction], n)
    out = changelog.iloc[first][by].reset_index(drop=True)
    out[column] = fn.extract(fn.subtract(added, taken))
    return out


def latest_panes(changelog: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The current value of every window: its last pane, unless retracted after it."""
    order = np.lexsort((changelog["is_retraction"].to_numpy(bool), changelog["pane_index"]))
    ordered = changelog.iloc[order]
    last = ordered.groupby([*keys, "window_start", "window_end"], sort=False).tail(1)
    return last[~last["is_retraction"].astype(bool)].reset_index(drop=True)
