"""Distinct values and unions of integer arrays, found by sorting; whether an
array's values sort together at all.

numpy 2.x's ``np.unique`` without ``return_index``/``return_inverse``/
``return_counts`` (and so ``np.union1d``) collects the distinct values in a
node-based hash set: on arrays of many distinct integers it is 10 to 40 times
slower than a sort (numpy/numpy#31969). The steps call these on every micro-batch,
so they sort instead; the result is the same sorted array of distinct values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: What ``pandas.api.types.infer_dtype`` calls values of types that do not compare
#: with each other (numbers and text).
_UNSORTABLE = frozenset({"mixed", "mixed-integer"})


def sorts_together(values: np.ndarray) -> bool:
    """Whether ``values`` (NULLs aside) are of types that compare with each other:
    pandas' ``sort_values`` raises on numbers mixed with text, while its
    ``factorize(sort=True)`` orders them anyway, so a caller that sorts by codes
    asks first (one pass in C)."""
    return values.dtype != object or pd.api.types.infer_dtype(values) not in _UNSORTABLE


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer (or datetime) array, ascending: what
    ``np.unique(values)`` returns."""
    ordered = np.sort(np.asarray(values).ravel())
    if len(ordered) < 2:
        return ordered
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


def union_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distinct values of two integer arrays, ascending: ``np.union1d(a, b)``."""
    return distinct_sorted(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))


def rows_union(a: np.ndarray, b: np.ndarray, size: int) -> np.ndarray:
    """The distinct row numbers of ``a`` and ``b`` (each in ``[0, size)``),
    ascending: one mask over the rows, no sort."""
    marked = np.zeros(size, dtype=bool)
    marked[a] = True
    marked[b] = True
    return np.flatnonzero(marked)
