"""``model.keep.TopRows``: a group keeps the rows that fewer than ``n`` of its rows
precede (ties with the ``n``-th and NULLs too), in their order; checked against
counting, row by row, over random groups."""

from __future__ import annotations

import random
from datetime import timedelta

import numpy as np
import pytest

from headwater.model.combiners import Sum, ToList
from headwater.model.keep import TopRows
from headwater.model.reducer import Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.triggers import AfterCount, Repeatedly
from headwater.model.windows import GlobalWindows, Sessions


def _objects(lists: list[list]) -> np.ndarray:
    out = np.empty(len(lists), dtype=object)
    for i, values in enumerate(lists):
        out[i] = values
    return out


def _precedes(x: tuple, y: tuple, descending: tuple[bool, ...]) -> bool:
    for a, b, desc in zip(x, y, descending, strict=True):
        if a != b:
            return a > b if desc else a < b
    return False


@pytest.mark.parametrize("seed", range(300))
def test_kept_rows_are_those_fewer_than_n_precede(seed: int) -> None:
    rng = random.Random(seed)
    n, descending = rng.randint(1, 3), (rng.random() < 0.5, rng.random() < 0.5)
    sizes = [rng.randint(0, 8) for _ in range(rng.randint(1, 5))]
    a = [[None if rng.random() < 0.1 else rng.randint(0, 3) for _ in range(s)] for s in sizes]
    b = [[rng.choice("xyz") for _ in range(s)] for s in sizes]
    ids = [[f"{g}-{i}" for i in range(s)] for g, s in enumerate(sizes)]
    keep = TopRows(n, (("a", descending[0]), ("b", descending[1])))
    lists = {"a": _objects(a), "b": _objects(b), "id": _objects(ids)}
    at, kept = keep.pruned(lists)
    after = {name: list(values) for name, values in lists.items()}
    for name, values in kept.items():
        for place, group in enumerate(at):
            after[name][group] = values[place]
    for g in range(len(sizes)):
        rows = list(zip(a[g], b[g], ids[g], strict=True))
        known = [r for r in rows if r[0] is not None]
        expected = [
            r
            for r in rows
            if r[0] is None or sum(_precedes(o[:2], r[:2], descending) for o in known) < n
        ]
        assert list(zip(after["a"][g], after["b"][g], after["id"][g], strict=True)) == expected
    assert all(len(after["a"][g]) < sizes[g] for g in at)  # only groups that lost rows


def test_values_that_do_not_compare_keep_every_row() -> None:
    lists = {"a": _objects([[1, "x", 2.5], [3, 1]])}
    at, kept = TopRows(1, (("a", False),)).pruned(lists)
    assert not len(at) and not kept


def test_reducer_keeps_the_first_rows_of_each_key() -> None:
    strategy = WindowingStrategy(window_fn=GlobalWindows(), trigger=Repeatedly(AfterCount(1)))
    aggregations = {"v": (ToList(), "v"), "t": (ToList(), "t")}
    reducer = Reducer(strategy, aggregations, TopRows(2, (("v", True),)))
    for step, values in enumerate([[5, 1, 7], [7, 2], [9, 0, 7]]):
        keys = np.array(["k"] * len(values), dtype=object)
        t = np.arange(len(values), dtype=np.int64) + 10 * step
        panes = reducer.step(keys, t, {"v": np.array(values), "t": t}).panes
    (kept,) = panes["v"]
    assert kept == [7, 7, 9, 7]  # 9 and the 7s tied with the second, in arrival order
    assert list(panes["t"][0]) == [2, 10, 20, 22]


@pytest.mark.parametrize(
    ("strategy", "aggregations", "keep", "error"),
    [
        (GlobalWindows(), {"v": (Sum(), "v")}, TopRows(1, (("v", True),)), "ToList"),
        (GlobalWindows(), {"v": (ToList(), "v")}, TopRows(1, (("w", True),)), "do not exist"),
        (GlobalWindows(), {"v": (ToList(), "v")}, TopRows(0, (("v", True),)), "n >= 1"),
        (
            Sessions(timedelta(seconds=1)),
            {"v": (ToList(), "v")},
            TopRows(1, (("v", True),)),
            "do not merge",
        ),
    ],
)
def test_a_keep_the_reducer_cannot_apply_is_refused(strategy, aggregations, keep, error) -> None:
    with pytest.raises(ValueError, match=error):
        Reducer(WindowingStrategy(window_fn=strategy), aggregations, keep)
