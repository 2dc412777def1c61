"""Object arrays of value sequences (a group's values, one tuple or list per
group), made, flattened and cut in C: ``map`` over builtins and ``itertools``, no
Python frame per group. The ``ToList`` combiner, the reducer's pruning
(``model.keep``) and the general path's evaluation (which reads a step's groups as
flat columns) share them."""

from __future__ import annotations

import itertools

import numpy as np


def empty_tuples(n: int) -> np.ndarray:
    """``n`` empty tuples (one object: a tuple never changes), as an object array."""
    return np.fromiter(itertools.repeat((), n), dtype=object, count=n)


def flat_lists(lists) -> np.ndarray:
    """The values of a sequence of tuples or lists (an object array, a Series), one
    after another, as an object array."""
    total = sum(map(len, lists))
    return np.fromiter(itertools.chain.from_iterable(lists), dtype=object, count=total)


def split_list(values: list | tuple, sizes: np.ndarray) -> np.ndarray:
    """``values`` cut into consecutive runs of ``sizes`` (of the type of ``values``),
    as an object array."""
    bounds = np.r_[0, np.cumsum(sizes)].tolist()
    runs = map(slice, bounds[:-1], bounds[1:])
    return np.fromiter(map(values.__getitem__, runs), dtype=object, count=len(sizes))
