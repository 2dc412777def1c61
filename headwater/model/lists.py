"""Object arrays of lists (a group's values, one list per group), made, flattened
and cut in C: ``map`` over builtins and ``itertools``, no Python frame per list.
The ``ToList`` combiner, the reducer's pruning (``model.keep``) and the general
path's evaluation (which reads a step's groups as flat columns) share them."""

from __future__ import annotations

import itertools

import numpy as np


def empty_lists(n: int) -> np.ndarray:
    """``n`` new empty lists, as an object array."""
    return np.fromiter(map(list, itertools.repeat((), n)), dtype=object, count=n)


def flat_lists(lists) -> np.ndarray:
    """The values of a sequence of lists (an object array, a Series), one after
    another, as an object array."""
    total = sum(map(len, lists))
    return np.fromiter(itertools.chain.from_iterable(lists), dtype=object, count=total)


def split_list(values: list, sizes: np.ndarray) -> np.ndarray:
    """``values`` cut into consecutive lists of ``sizes``, as an object array."""
    bounds = np.r_[0, np.cumsum(sizes)].tolist()
    runs = map(slice, bounds[:-1], bounds[1:])
    return np.fromiter(map(values.__getitem__, runs), dtype=object, count=len(sizes))
