"""WindowTable's lookup, its window hashes in parts: after any sequence of appends,
drops and lookups it finds each window's row as a dictionary of every window does,
also when windows share a hash (within a part or across parts)."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.model import window_table
from headwater.model.combiners import Count
from headwater.model.window_table import WindowTable


def _windows(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    key = rng.integers(0, 40, n)
    start = rng.integers(0, 30, n) * 10
    return key, start, start + rng.choice([10, 20], n)


def _collide_within(key, start, end):
    return np.asarray(key, np.int64) % 7  # many windows per hash in one part


def _collide_across(key, start, end):
    """Windows that differ only in their end share a hash: mostly in different parts,
    and a window looked up that is absent finds its namesake's hash."""
    return np.asarray(key, np.int64) * 1000 + np.asarray(start, np.int64)


@pytest.mark.parametrize("hashing", [None, _collide_within, _collide_across])
@pytest.mark.parametrize("seed", range(3))
def test_lookup_equals_a_dictionary_of_every_window(monkeypatch, hashing, seed):
    if hashing is not None:
        monkeypatch.setattr(window_table, "_window_hash", hashing)
    rng = np.random.default_rng(seed)
    table = WindowTable({}, {"n": (Count(), None)})
    for step in range(120):
        key, start, end = _windows(rng, int(rng.integers(1, 25)))
        rows = table.lookup(key, start, end)
        c = table.cols
        where = {w: i for i, w in enumerate(zip(c["key"], c["start"], c["end"], strict=True))}
        want = [where.get(w, -1) for w in zip(key, start, end, strict=True)]
        assert rows.tolist() == want, step
        missing = rows < 0
        if missing.any():
            new = np.unique(np.stack([key, start, end])[:, missing], axis=1)
            table.append({"key": new[0], "start": new[1], "end": new[2]})
        if step % 17 == 16:  # windows collected: rows renumbered
            table.keep(rng.random(len(table)) < 0.8)
    assert len(table) > 100
