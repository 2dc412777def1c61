"""KeyDictionary, a shard's key codes in parts: after any sequence of steps it
codes keys as the one ``pd.Index`` it replaces did (every key appended, the index
looked up again), keys of mixed types and missing values included, and it stays
a logarithmic number of parts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headwater.model.window_table import KeyDictionary

#: Keys that pandas' object index matches across types (1 == 1.0 == True), missing
#: values (None, NaN) and text.
ODD = [1, 1.0, True, 0, False, None, float("nan"), "1", "a", ("t", 1), b"x"]


def reference_encode(index: pd.Index, keys: np.ndarray) -> tuple[pd.Index, np.ndarray]:
    """What the key dictionary was: one index of every key, rebuilt when one is added."""
    keys = pd.Index(keys, dtype=object)
    codes = index.get_indexer(keys)
    if (codes < 0).any():
        index = index.append(pd.Index(keys[codes < 0].unique(), dtype=object))
        codes = index.get_indexer(keys)
    return index, codes.astype(np.int64)


def batch(rng: np.random.Generator, universe: int) -> np.ndarray:
    n = int(rng.integers(0, 80))
    out = np.empty(n, dtype=object)
    out[:] = [f"k{int(i)}" for i in rng.integers(0, universe, n)]
    odd = rng.random(n) < 0.05
    for at, i in zip(np.flatnonzero(odd), rng.integers(0, len(ODD), int(odd.sum())), strict=True):
        out[at] = ODD[int(i)]  # one by one: numpy would unpack a tuple
    return out


def test_codes_equal_one_rebuilt_index() -> None:
    rng = np.random.default_rng(11)
    keys, index = KeyDictionary(), pd.Index([], dtype=object)
    for step in range(300):
        values = batch(rng, universe=20 + 10 * step)
        index, want = reference_encode(index, values)
        assert list(keys.encode(values)) == list(want), step
        assert len(keys) == len(index)
        # the very objects first seen (NaN is one object: a list compares it by identity)
        assert [(type(k), k) for k in keys.decode(want)] == [(type(k), k) for k in index[want]]
        unknown = np.array([f"never{step}", "k0"], dtype=object)
        assert list(keys.codes(unknown)) == list(index.get_indexer(pd.Index(unknown, dtype=object)))
        assert keys._parts.depth <= 2 * math.log2(len(keys) + 2) + 2, step


def test_subset_and_restore_keep_codes_in_order() -> None:
    rng = np.random.default_rng(3)
    keys = KeyDictionary()
    for _ in range(50):
        keys.encode(batch(rng, universe=500))
    live = np.flatnonzero(rng.random(len(keys)) < 0.5)
    kept = keys.subset(live)
    assert len(kept) == len(live)
    assert list(kept.codes(keys.decode(live))) == list(range(len(live)))
    restored = KeyDictionary(list(keys))
    assert list(restored.codes(keys.decode(np.arange(len(keys))))) == list(range(len(keys)))
