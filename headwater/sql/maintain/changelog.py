"""The changelog of a query: what changed in its result, group by group.

A streaming query's result is maintained per event-time group (a window, or a
window and key). When a group's trigger fires, its result rows are recomputed
and compared with what was materialized for it last: rows that went away are
withdrawn (``undo``), new rows are added. ``ver`` numbers the changelog rows of
one group from 0; ``ptime`` is the processing time of the change. A group whose
recomputed result equals the last one adds nothing: a row appears only when the
relation actually changes.

A table view is the changelog applied up to a processing time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.model.arrays import sorts_together
from headwater.model.combiners import occurrences
from headwater.sql.maintain.group_parts import (
    GroupParts,
    combine_hash,
    group_arrays,
    group_hashes,
    mix64,
)

#: Columns of a changelog after the query's own columns.
CHANGE_COLUMNS = ("undo", "ptime", "ver")
#: Columns that name an event-time group (the model's key and window).
GROUP_COLUMNS = ("__gk", "__gs", "__ge")
_SEQ = "__hw_seq"
#: A changelog's group hashes (:func:`group_hashes`), while a step computes it.
_GROUP_HASH = "__hw_group_hash"


def _numbered(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Each row with its occurrence number among equal rows (a multiset as a set)."""
    out = frame.copy()
    out[_SEQ] = out.groupby(columns, dropna=False, sort=False).cumcount()
    return out


def _same_groups(a: pd.DataFrame, ia: np.ndarray, b: pd.DataFrame, ib: np.ndarray) -> np.ndarray:
    """Whether row ``ia[i]`` of ``a`` and row ``ib[i]`` of ``b`` name one group."""
    out = np.ones(len(ia), dtype=bool)
    for c in GROUP_COLUMNS:
        out &= np.asarray(a[c].to_numpy()[ia] == b[c].to_numpy()[ib], dtype=bool)
    return out


def _sorted_change(
    old: pd.DataFrame, new: pd.DataFrame, keys: list[str], groups: list[str]
) -> pd.DataFrame | None:
    """``old``'s rows withdrawn, then ``new``'s added, each in the order the outer
    merge of the two gives the rows of one group (``groups``: columns equal in a
    group's rows) by ``keys``, nulls last; None when their types differ or their
    values do not sort (the merge decides then)."""
    if not (old[keys].dtypes == new[keys].dtypes).all():
        return None
    parts = []
    for frame, undo in ((old, True), (new, False)):
        if len(frame):
            ordered = value_ordered(frame, keys, groups)
            if ordered is None:
                return None
            parts.append(ordered.assign(undo=undo))
    return pd.concat(parts, ignore_index=True)


def value_ordered(frame: pd.DataFrame, keys: list[str], ties: list[str]) -> pd.DataFrame | None:
    """``frame`` with the rows that share their ``ties`` columns in the order of
    their ``keys`` (a stable sort, nulls last, as the merge sorts them), each in
    the place of one of them; the other rows where they are. Only the order among
    rows of one group shows in the changelog (:func:`in_order` sorts the groups),
    so a step of one row per group sorts nothing, and the ``ties`` columns, equal
    within a tie, are not sorted by. None when the values do not sort."""
    frame = _plain(frame)
    tied = _tied(frame, ties)
    if not len(tied):
        return frame
    ranks = _value_ranks(frame, [c for c in keys if c not in ties], tied)
    if ranks is None:
        return None
    places = np.arange(len(frame))
    places[tied] = tied[np.argsort(ranks, kind="stable")]
    return frame.iloc[places].reset_index(drop=True)


def _value_ranks(frame: pd.DataFrame, keys: list[str], rows: np.ndarray) -> np.ndarray | None:
    """Dense ranks of ``frame``'s ``rows`` in the order of their ``keys`` (nulls
    last). Each column ranks only the rows the columns before it left tied: a text
    column after one that tells the rows apart is never read. None when values
    that must be compared do not sort."""
    ranks = np.zeros(len(rows), dtype=np.int64)
    for c in keys:
        shared = np.bincount(ranks)[ranks] > 1
        if not shared.any():
            break
        values = frame[c].to_numpy()[rows[shared]]
        if not sorts_together(values):
            return None
        codes = np.zeros(len(rows), dtype=np.int64)
        try:
            codes[shared] = _sort_codes(values)
        except TypeError:
            return None
        order = np.lexsort((codes, ranks))
        ranked, coded = ranks[order], codes[order]
        step = (ranked[1:] != ranked[:-1]) | (coded[1:] != coded[:-1])
        ranks[order] = np.r_[0, np.cumsum(step)]
    return ranks


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` indexed 0..n-1: itself when it is already (no copy)."""
    index = frame.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return frame
    return frame.reset_index(drop=True)


#: The dtype kinds whose values compare and sort as int64 (NaT and nulls too).
_INTEGRAL = frozenset("iubMm")


def _integral(frame: pd.DataFrame, columns: list[str]) -> list[np.ndarray] | None:
    """``columns`` of ``frame`` as int64 arrays, or None if one is not integral."""
    arrays = []
    for c in columns:
        column = frame[c]
        if column.dtype.kind not in _INTEGRAL or column.hasnans:
            return None
        arrays.append(column.to_numpy().astype(np.int64, copy=False))
    return arrays


def _sort_codes(values: np.ndarray) -> np.ndarray:
    """int64 codes that sort as ``values`` do (nulls last, as ``sort_values``'
    ``na_position="last"``): integers and booleans themselves, else the ranks of
    the distinct values (one hash pass and a sort of the distinct values only, not
    a sort of every row's text; times so too, their NaT last)."""
    if values.dtype.kind in "iub":
        return values.astype(np.int64, copy=False)
    codes, uniques = pd.factorize(values, sort=True)
    return np.where(codes < 0, len(uniques), codes).astype(np.int64, copy=False)


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` (int64) shifted to start at 0 in the narrowest unsigned type that holds
    it: sort keys of at most 16 bits sort by radix (``np.lexsort``), several times
    faster than int64 keys, in the same order."""
    if not len(a):
        return a
    low, high = int(a.min()), int(a.max())
    for kind in (np.uint8, np.uint16):
        if high - low <= np.iinfo(kind).max:
            return (a - low).astype(kind)
    return a


def _equal_runs(arrays: list[np.ndarray], order: np.ndarray) -> np.ndarray:
    """For the rows in ``order``, whether each equals the next on every array."""
    same = np.ones(max(len(order) - 1, 0), dtype=bool)
    for a in arrays:
        sorted_ = a[order]
        same &= sorted_[1:] == sorted_[:-1]
    return same


def _tied(frame: pd.DataFrame, ties: list[str]) -> np.ndarray:
    """The positions of the rows of ``frame`` that share all their ``ties`` columns
    with another row. The integral columns are compared first (one sort of the
    numbers), so only rows equal on them have their other columns hashed."""
    numbers = [c for c in ties if frame[c].dtype.kind in _INTEGRAL]
    arrays = _integral(frame, numbers) if numbers else None
    if arrays is None or len(frame) < 2:
        return np.flatnonzero(frame.duplicated(ties, keep=False).to_numpy())
    order = np.lexsort(arrays[::-1])
    same = _equal_runs(arrays, order)
    maybe = np.zeros(len(frame), dtype=bool)
    maybe[order[1:][same]] = True
    maybe[order[:-1][same]] = True
    candidates = np.flatnonzero(maybe)
    if not len(candidates) or len(numbers) == len(ties):
        return candidates
    sub = frame.iloc[candidates]
    return candidates[sub.duplicated(ties, keep=False).to_numpy()]


def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with one bit pattern per float value (-0.0 as 0.0, one NaN), so that
    values the merge takes as equal hash equally."""
    floats = [c for c in frame.columns if frame[c].dtype.kind == "f"]
    if not floats:
        return frame
    out = frame.copy()
    for c in floats:
        v = out[c].to_numpy()
        out[c] = np.where(np.isnan(v), np.nan, v + 0.0)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether the values of ``a`` equal those of ``b`` (nulls equal), element-wise."""
    eq = np.asarray(a == b, dtype=bool)
    return eq | (pd.isna(a) & pd.isna(b))


def row_difference(
    old: pd.DataFrame, new: pd.DataFrame, keys: list[str], groups: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of ``old`` not in ``new`` and of ``new`` not in ``old`` (multisets:
    the k-th of equal rows pairs with the k-th), as two boolean masks, by one hash
    per row (:func:`_row_hashes`; ``groups``: the group hashes of ``old``'s rows
    then ``new``'s, when known). ``None`` when the hashes cannot decide
    (unhashable values, or two different rows with one hash): the caller then
    compares by value."""
    if not len(old) or not len(new):
        return np.ones(len(old), dtype=bool), np.ones(len(new), dtype=bool)
    both = pd.concat([old[keys], new[keys]], ignore_index=True)  # one dtype per column
    n = len(old)
    try:
        hashes, whole = _row_hashes(both, keys, n, groups)
    except TypeError:
        return None
    seq = np.r_[occurrences(hashes[:n]), occurrences(hashes[n:])]
    new_index = pd.MultiIndex.from_arrays([hashes[n:], seq[n:]])
    at = new_index.get_indexer(pd.MultiIndex.from_arrays([hashes[:n], seq[:n]]))
    i = np.flatnonzero(at >= 0)
    j = n + at[i]
    equal = np.ones(len(i), dtype=bool)
    try:
        for c in keys:
            values = both[c].to_numpy()
            equal &= _same(values[i], values[j])
    except (TypeError, ValueError):
        return None
    if not equal[whole[i] | whole[j]].all():
        return None  # two different rows with one hash of all their columns
    matched = np.zeros(n, dtype=bool)
    matched[i[equal]] = True
    kept = np.zeros(len(new), dtype=bool)
    kept[at[i[equal]]] = True
    return ~matched, ~kept


def _row_hashes(
    both: pd.DataFrame, keys: list[str], n: int, groups: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """A hash of each row of ``both`` (the first ``n`` rows one side, the others the
    other) and where it covers every column. The group and the integral columns
    are hashed as numbers first; the other columns (text, floats) only for the rows
    whose hash another row of their side shares: elsewhere at most one row of each
    side has the hash, and comparing the two tells whether they pair."""
    numeric = [c for c in keys if isinstance(both[c].dtype, np.dtype)]
    numeric = [c for c in numeric if both[c].dtype.kind in _INTEGRAL]
    if groups is not None:
        numeric = [c for c in numeric if c not in GROUP_COLUMNS]
    rest = [c for c in keys if c not in numeric and (groups is None or c not in GROUP_COLUMNS)]
    h = np.zeros(len(both), dtype=np.uint64) if groups is None else groups
    for c in numeric:
        h = combine_hash(h, both[c].to_numpy())
    if not rest:
        return h, np.ones(len(both), dtype=bool)
    distinct, inverse = np.unique(h, return_inverse=True)
    sides = (inverse[:n], inverse[n:])
    shared = np.zeros(len(distinct), dtype=bool)
    for side in sides:
        shared |= np.bincount(side, minlength=len(distinct)) > 1
    shared = shared[inverse]
    if shared.any():
        other = pd.util.hash_pandas_object(_canonical(both[rest][shared]), index=False)
        h = h.copy()
        h[shared] = mix64(h[shared] ^ other.to_numpy(np.uint64))
    return h, shared


def _counted(parts: GroupParts, column: str) -> pd.DataFrame:
    """The rows of ``parts`` (``GROUP_COLUMNS`` and an integer ``column``), typed
    when there are none."""
    frame = parts.frame()
    if frame is not None:
        return frame
    types = {"__gk": object, "__gs": np.int64, "__ge": np.int64, column: np.int64}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in types.items()})


class RowCounts:
    """How many rows of each group were evaluated (the append path's bookkeeping:
    a group's rows after these are new), one row per group in :class:`GroupParts`:
    a step looks up and records its fired groups only, whatever the number kept.
    Groups are told apart by value where their hashes collide."""

    def __init__(self, groups: pd.DataFrame | None = None) -> None:
        kept = None if groups is None else groups[[*GROUP_COLUMNS, "n"]].reset_index(drop=True)
        self._parts = GroupParts(kept)

    @property
    def groups(self) -> pd.DataFrame:
        """The groups (``GROUP_COLUMNS``) and their counts (``n``): the snapshot's form."""
        return _counted(self._parts, "n")

    def lookup(self, groups: pd.DataFrame) -> np.ndarray:
        """The count of each group (0: none evaluated yet)."""
        out = np.zeros(len(groups), dtype=np.int64)
        found = self._parts.find(group_arrays(groups), group_hashes(groups))
        if found is not None:
            out[found[1]] = found[0]["n"].to_numpy(np.int64)
        return out

    def record(self, groups: pd.DataFrame, counts: np.ndarray, gone: pd.DataFrame) -> None:
        """Set the counts of ``groups`` (distinct) and forget those of ``gone``."""
        self._parts.pop(group_arrays(gone), group_hashes(gone))
        hashes = group_hashes(groups)
        self._parts.pop(group_arrays(groups), hashes)
        fresh = {c: a for c, a in zip(GROUP_COLUMNS, group_arrays(groups), strict=True)}
        self._parts.add(pd.DataFrame({**fresh, "n": np.asarray(counts, np.int64)}), hashes)

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``."""
        self._parts.expire(horizon)


class Materializer:
    """The last materialized rows of every group, and the changelog of each firing.

    The rows (:attr:`last`) and the groups' next versions (:attr:`versions`) are
    kept in :class:`GroupParts`, so that a step's work follows the groups that
    fired, not every group kept.

    :attr:`seen`: for a query whose groups only grow (its maintainer's
    ``append``), how many of each group's rows were evaluated (:class:`RowCounts`);
    None when not known (the full evaluation then)."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)
        self._keys = [*GROUP_COLUMNS, *self.columns]
        #: the rows of :attr:`last` (None: no results yet)
        self._rows: GroupParts | None = None
        #: :attr:`last` with no rows, typed by the first results
        self._typed: pd.DataFrame | None = None
        self._versions = GroupParts()
        self.seen: RowCounts | None = None

    @property
    def last(self) -> pd.DataFrame | None:
        """The last materialized rows of every group (typed by the first results)."""
        if self._rows is None:
            return None
        frame = self._rows.frame()
        return self._typed if frame is None else frame

    @last.setter
    def last(self, frame: pd.DataFrame | None) -> None:
        self._rows = None if frame is None else GroupParts(frame.reset_index(drop=True))
        self._typed = None if frame is None else frame.iloc[:0]

    def _kept(self, typed: pd.DataFrame) -> GroupParts:
        """The rows' parts, started (typed by ``typed``) at the first results."""
        if self._rows is None:
            self._rows, self._typed = GroupParts(), typed.iloc[:0]
        return self._rows

    def seen_rows(self, fired: pd.DataFrame) -> np.ndarray | None:
        """How many rows of each group of ``fired`` were evaluated (0: none yet);
        None when not known (:attr:`seen` is None)."""
        return None if self.seen is None else self.seen.lookup(fired)

    def saw(self, fired: pd.DataFrame, lengths: np.ndarray, gone: pd.DataFrame | None = None):
        """Record that the groups of ``fired`` had ``lengths`` rows evaluated, and
        that the groups of ``gone`` no longer exist."""
        if self.seen is not None:
            gone = fired.iloc[:0] if gone is None else gone
            self.seen.record(fired, np.asarray(lengths, dtype=np.int64), gone)

    def added(self, fired: pd.DataFrame, added: pd.DataFrame, ptime: int) -> pd.DataFrame | None:
        """The changelog of a step whose groups (``fired``) only gained the rows
        ``added`` (``GROUP_COLUMNS`` + the query's columns), as :meth:`apply` gives
        it; None (nothing done) where :meth:`apply`'s diff could pair rows
        otherwise: a float zero (0.0 and -0.0 are equal) or values that do not sort."""
        if not len(fired):
            return self._empty()
        new = added[self._keys]
        for c in self.columns:
            column = new[c]
            if column.dtype.kind == "f" and (column.to_numpy() == 0).any():
                return None
        if not len(new):
            self._kept(new)
            return self._empty()
        change = _sorted_change(new.iloc[:0], new, self._keys, list(GROUP_COLUMNS))
        if change is None:
            return None
        self._kept(new).add(new.reset_index(drop=True))
        change["ptime"] = ptime
        return self._versioned(change)

    @property
    def versions(self) -> pd.DataFrame:
        """The next ``ver`` of every group that has changed (``GROUP_COLUMNS`` + ver)."""
        return _counted(self._versions, "ver")

    @versions.setter
    def versions(self, frame: pd.DataFrame) -> None:
        self._versions = GroupParts(frame.reset_index(drop=True))

    def apply(self, fired: pd.DataFrame, results: pd.DataFrame, ptime: int) -> pd.DataFrame:
        """The changelog rows of one firing.

        ``fired``: the groups that fired (``GROUP_COLUMNS``); ``results``: their
        recomputed rows (``GROUP_COLUMNS`` + the query's columns). Vectorized:
        one multiset difference over all fired groups, by row hashes.
        """
        if not len(fired):
            return self._empty()
        fired = fired[list(GROUP_COLUMNS)].drop_duplicates()
        new = results[self._keys].reset_index(drop=True)
        rows = self._kept(new)
        hashes = group_hashes(new)
        taken = rows.pop(group_arrays(fired), group_hashes(fired))
        old, old_hashes = (self._typed, hashes[:0]) if taken is None else (taken[0], taken[2])
        change = self._change(old[self._keys], old_hashes, new, hashes)
        rows.add(new, hashes)
        if not len(change):
            return self._empty()
        change["ptime"] = ptime
        return self._versioned(change)

    def _change(
        self, old: pd.DataFrame, old_hashes: np.ndarray, new: pd.DataFrame, new_hashes: np.ndarray
    ) -> pd.DataFrame:
        """The withdrawn rows of ``old`` and the added rows of ``new`` (``undo``), in
        the order of the merge that compares them by value. The rows both have are
        set aside by their hashes first: the merge sees only the rows that change,
        and the changed rows keep their group hashes (``_GROUP_HASH``) for
        :meth:`_numbers`."""
        gone = row_difference(old, new, self._keys, np.r_[old_hashes, new_hashes])
        if gone is not None:
            if not (gone[0].any() or gone[1].any()):
                return pd.DataFrame(columns=[*self._keys, "undo"])
            old, new = old[gone[0]], new[gone[1]]
            hashed = (
                old.assign(**{_GROUP_HASH: old_hashes[gone[0]]}),
                new.assign(**{_GROUP_HASH: new_hashes[gone[1]]}),
            )
            ordered = _sorted_change(*hashed, self._keys, [_GROUP_HASH])
            if ordered is not None:
                return ordered
        both = _numbered(old, self._keys).merge(
            _numbered(new, self._keys), how="outer", on=[*self._keys, _SEQ], indicator=True
        )
        undo = both[both["_merge"] == "left_only"]
        added = both[both["_merge"] == "right_only"]
        return pd.concat(
            [undo.assign(undo=True), added.assign(undo=False)], ignore_index=True
        ).drop(columns=["_merge", _SEQ])

    def appended(self, added: pd.DataFrame) -> pd.DataFrame:
        """The changelog of firings that only add rows, many steps at once: ``added``
        holds the group columns, the query's columns and each row's ``ptime``. A
        query whose operators take each row on its own never changes a row it
        gave, so each step's changes are its new rows; ordered and numbered as
        :meth:`apply` orders them step by step (equal rows by the merge's sort)."""
        if not len(added):
            return self._empty()
        ordered = value_ordered(added, self._keys, ["ptime", *GROUP_COLUMNS])
        if ordered is not None:
            return self._versioned(ordered.assign(undo=False))
        new = _numbered(added, self._keys)
        on = [*self._keys, _SEQ]
        both = new[on].iloc[:0].merge(new, how="outer", on=on)
        return self._versioned(both.drop(columns=[_SEQ]).assign(undo=False))

    def expire(self, horizon: int) -> None:
        """Forget the groups whose windows end at or before ``horizon``: the model
        has collected them, so they never fire again."""
        if self.seen is not None:
            self.seen.expire(horizon)
        if self._rows is not None:
            self._rows.expire(horizon)
        self._versions.expire(horizon)

    def forget(self, keys: np.ndarray, ptime: int) -> pd.DataFrame:
        """Withdraw the rows of the groups of ``keys`` at ``ptime`` and forget them
        (a state time-to-live). Their versions stay until :meth:`forget_versions`:
        a row of such a key in the same step continues its numbering, so that a
        consumer ordering by ``ptime, ver`` withdraws before it adds."""
        if self._rows is None or not len(keys):
            return self._empty()
        self.seen = None  # a key started afresh: its rows counted from 0 again
        gone = self._rows.pop_keys(keys)
        if gone is None:
            return self._empty()
        return self._versioned(gone.assign(undo=True, ptime=ptime))

    def forget_versions(self, keys: np.ndarray) -> None:
        """Forget the version counters of the groups of ``keys``: a later row of such
        a key starts a fresh group, numbered from 0 again."""
        if len(keys):
            self._versions.pop_keys(keys)

    def _versioned(self, change: pd.DataFrame) -> pd.DataFrame:
        """Number the rows per group, continuing from the group's previous changes."""
        change = in_order(change)
        numbers = self._numbers(change)
        if numbers is None:
            return self._versioned_by_merge(change)
        change["ver"] = numbers
        return change[[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS]]

    def _numbers(self, change: pd.DataFrame) -> np.ndarray | None:
        """The ``ver`` of each row of ``change`` (in order), by one pass over the
        group hashes, and the groups' next versions; None when two groups of
        ``change`` share a hash (:meth:`_versioned_by_merge` numbers them then)."""
        hashed = _GROUP_HASH in change
        hashes = change[_GROUP_HASH].to_numpy(np.uint64) if hashed else group_hashes(change)
        unique, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        if not _same_groups(change, np.arange(len(change)), change, first[inverse]).all():
            return None
        groups = tuple(a[first] for a in group_arrays(change))
        base = np.zeros(len(unique), dtype=np.int64)
        taken = self._versions.pop(groups, unique)
        if taken is not None:
            base[taken[1]] = taken[0]["ver"].to_numpy(np.int64)
        following = base + np.bincount(inverse, minlength=len(unique))
        kept = dict(zip(GROUP_COLUMNS, groups, strict=True))
        self._versions.add(pd.DataFrame({**kept, "ver": following}), unique)
        return base[inverse] + occurrences(hashes)

    def _versioned_by_merge(self, change: pd.DataFrame) -> pd.DataFrame:
        """:meth:`_versioned` by merges (groups whose hashes collide)."""
        group = list(GROUP_COLUMNS)
        fired = change[group].drop_duplicates()
        taken = self._versions.pop(group_arrays(fired), group_hashes(fired))
        known = self.versions.iloc[:0] if taken is None else taken[0]
        base = change[group].merge(known, how="left", on=group)["ver"]
        offset = base.to_numpy(np.float64, na_value=0).astype(np.int64)
        change["ver"] = offset + change.groupby(group, sort=False, dropna=False).cumcount()
        counts = change.groupby(group, sort=False, dropna=False)["ver"].max().reset_index()
        counts["ver"] += 1
        self._versions.add(counts)
        return change[[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS]]

    def _empty(self) -> pd.DataFrame:
        return pd.DataFrame(columns=[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS])


def in_order(changes: pd.DataFrame) -> pd.DataFrame:
    """The changelog's order: by processing time; within one, withdrawals first
    (a consumer deletes before it inserts), then by window, key and version.

    The integral keys before the key text (``ptime``, ``undo``, the window) are
    sorted as numbers, and only rows equal on them are sorted by the rest: a
    changelog of many groups per step (every row its own) sorts no text."""
    keys = [c for c in ("ptime", "undo", "__gs", "__ge", "__gk", "ver") if c in changes]
    ascending = [c != "undo" for c in keys]
    cut = next((i for i, c in enumerate(keys) if c == "__gk"), len(keys))
    arrays = _integral(changes, keys[:cut]) if len(changes) > 1 else None
    if arrays is None:
        ordered = changes.sort_values(keys, ascending=ascending, kind="stable")
        return ordered.reset_index(drop=True)
    arrays = [-a if c == "undo" else a for a, c in zip(arrays, keys, strict=False)]
    order = np.lexsort(arrays[::-1])
    rest = keys[cut:]
    same = _equal_runs(arrays, order) if rest else np.zeros(0, dtype=bool)
    if same.any():
        run = np.r_[0, np.cumsum(~same)]
        tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])
        rows = order[tied]
        codes = [_sort_codes(changes[c].to_numpy()[rows]) for c in rest]
        order[tied] = rows[np.lexsort([_narrow(a) for a in (*codes[::-1], run[tied])])]
    if (order[1:] > order[:-1]).all():
        return _plain(changes)
    out = changes.take(order)
    out.index = pd.RangeIndex(len(out))
    return out


def member_of(frame: pd.DataFrame, keys: pd.DataFrame) -> np.ndarray:
    """Whether each row of ``frame`` appears among the rows of ``keys`` (same columns)."""
    if not len(frame) or not len(keys):
        return np.zeros(len(frame), dtype=bool)
    # one hashed column first: the merge then costs the few candidates, not the frame
    first = keys.columns[0]
    maybe = frame[first].isin(pd.unique(keys[first].to_numpy())).to_numpy(bool)
    hit = np.zeros(len(frame), dtype=bool)
    if maybe.any():
        marked = keys.drop_duplicates().assign(__hw_hit=True)
        found = frame[maybe].merge(marked, how="left", on=list(keys.columns))["__hw_hit"]
        hit[maybe] = found.notna().to_numpy(bool)
    return hit


def table_view(
    changelog: pd.DataFrame, columns: list[str], as_of: int | None = None
) -> pd.DataFrame:
    """The relation as of processing time ``as_of`` (all of it when ``None``): every
    row added and not withdrawn since, in the order of the groups' windows."""
    log = changelog if as_of is None else changelog[changelog["ptime"] <= as_of]
    keys = [*GROUP_COLUMNS, *columns]
    if not len(log):
        return pd.DataFrame(columns=columns)
    log = log.reset_index(drop=True)
    sign = np.where(log["undo"].to_numpy(bool), -1, 1)
    net = log[keys].assign(__hw_n=sign, __hw_pos=np.arange(len(log)))
    agg = net.groupby(keys, dropna=False, sort=False).agg(
        __hw_n=("__hw_n", "sum"), __hw_pos=("__hw_pos", "max")
    )
    agg = agg[agg["__hw_n"] > 0].reset_index()
    agg = agg.loc[agg.index.repeat(agg["__hw_n"].to_numpy(np.int64))]
    agg = agg.sort_values(["__gs", "__ge", "__hw_pos"], kind="stable")
    return agg[columns].reset_index(drop=True)
