"""The sort-based distinct values and unions equal numpy's own."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.model.arrays import distinct_sorted, rows_union, union_sorted


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_distinct_sorted_is_numpys_unique(seed: int, dtype) -> None:
    rng = np.random.default_rng(seed)
    for n, spread in [(0, 5), (1, 5), (2, 1), (1000, 3), (5000, 100_000)]:
        values = rng.integers(0, spread, n).astype(dtype)
        got = distinct_sorted(values)
        assert got.dtype == values.dtype
        np.testing.assert_array_equal(got, np.unique(values))


@pytest.mark.parametrize("seed", range(5))
def test_union_sorted_is_numpys_union(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n, m in [(0, 0), (0, 3), (3, 0), (400, 50), (50, 400)]:
        a, b = rng.integers(-50, 500, n), rng.integers(-50, 500, m)
        np.testing.assert_array_equal(union_sorted(a, b), np.union1d(a, b))


def test_input_left_as_it_was() -> None:
    values = np.array([3, 1, 3, 2])
    distinct_sorted(values)
    np.testing.assert_array_equal(values, [3, 1, 3, 2])


def test_datetimes() -> None:
    values = np.array(["2026-01-02", "2026-01-01", "2026-01-02"], dtype="datetime64[ms]")
    np.testing.assert_array_equal(distinct_sorted(values), np.unique(values))


@pytest.mark.parametrize("seed", range(5))
def test_rows_union_is_numpys_union(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for size, n, m in [(1, 0, 0), (10, 10, 0), (10, 0, 10), (1000, 700, 40), (1000, 40, 700)]:
        a, b = rng.integers(0, size, n), rng.integers(0, size, m)
        np.testing.assert_array_equal(rows_union(a, b, size), np.union1d(a, b))
