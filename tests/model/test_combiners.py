"""Combiners: vectorized add/merge/extract against plain Python, inverses, sketches."""

from __future__ import annotations

import gc
import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from headwater.model import arrow_values
from headwater.model.combiners import (
    COMBINERS,
    ApproxDistinct,
    ApproxQuantiles,
    CombineFn,
    Count,
    CountDistinct,
    Max,
    Mean,
    Min,
    Sum,
    ToList,
    TopK,
)
from headwater.model.reducer import Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP
from headwater.model.triggers import AfterCount, Repeatedly
from headwater.model.windows import FixedWindows, Sessions

SEEDS = range(12)


def _by_group(values, groups, n):
    out = defaultdict(list)
    for g, v in zip(groups.tolist(), list(values), strict=True):
        out[g].append(v)
    return [out.get(i, []) for i in range(n)]


def _combine_in_chunks(fn, values, groups, n, rng, chunks=4):
    """add() on random chunks, then merge() of all partial accumulators."""
    cut = np.sort(rng.integers(0, len(values) + 1, chunks - 1))
    parts = []
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(values)], strict=True):
        parts.append(fn.add(values[lo:hi], groups[lo:hi], n))
    parts.append(fn.create(n))  # an empty accumulator is a neutral element
    acc = {}
    for field in parts[0]:
        arrs = [p[field] for p in parts]
        if any(a.dtype == object for a in arrs):
            merged = np.empty(sum(len(a) for a in arrs), dtype=object)
            pos = 0
            for a in arrs:
                merged[pos : pos + len(a)] = a
                pos += len(a)
            acc[field] = merged
        else:
            acc[field] = np.concatenate(arrs)
    which = np.tile(np.arange(n), len(parts))
    return fn.merge(acc, which, n)


def _data(rng, n_groups=7, n=400, floats=False, empty_group=True):
    groups = rng.integers(0, n_groups, n).astype(np.int64)
    groups[: 2 * n_groups] = np.arange(2 * n_groups) % n_groups  # every group present
    if empty_group:
        groups[groups == 3] = 2  # group 3 stays empty
    values = rng.normal(0, 100, n) if floats else rng.integers(-1000, 1000, n).astype(np.int64)
    return values, groups


@pytest.mark.parametrize("seed", SEEDS)
def test_sum_count_mean_min_max_vs_python(seed):
    rng = np.random.default_rng(seed)
    # add() sees every group (as in the Reducer); empty groups go through merge().
    values, groups = _data(rng, floats=bool(seed % 2), empty_group=False)
    n = 8
    buckets = _by_group(values, groups, n)
    for fn, expect in [
        (Sum(), lambda b: sum(b) if b else math.nan),  # SQL: NULL (NaN) for no input
        (Count(), len),
        (Mean(), lambda b: sum(b) / len(b) if b else math.nan),
        (Min(), lambda b: min(b) if b else math.nan),
        (Max(), lambda b: max(b) if b else math.nan),
    ]:
        whole = fn.merge(
            {f: np.r_[a, fn.create(1)[f]] for f, a in fn.add(values, groups, n - 1).items()},
            np.arange(n),
            n,
        )
        for acc in (whole, _combine_in_chunks(fn, values, groups, n, rng)):
            got = fn.extract(acc)
            assert len(got) == n
            for i in range(n):
                want = expect(buckets[i])
                if isinstance(want, float) and math.isnan(want):
                    assert math.isnan(got[i]), (fn, i, got[i])
                else:
                    assert got[i] == pytest.approx(want, rel=1e-9, abs=1e-9), (fn, i)


def test_sum_of_a_group_without_input_is_null():
    values = np.array([5, 7], dtype=np.int64)
    got = Sum().extract(Sum().add(values, np.array([0, 2]), 3))
    assert got[0] == 5 and np.isnan(got[1]) and got[2] == 7  # NULL is NaN (float64)
    full = Sum().extract(Sum().add(values, np.array([0, 1]), 2))
    assert full.tolist() == [5, 7] and full.dtype == np.int64  # no NULL: exact int64
    acc = {"sum": np.array([1, 2]), "n": np.array([1, 1])}
    merged = Sum().extract(Sum().merge(acc, np.array([0, 0]), 2))
    assert merged[0] == 3 and np.isnan(merged[1])
    only_nulls = Sum().extract(
        Sum().add(np.array([None, np.nan], dtype=object), np.zeros(2, int), 1)
    )
    assert np.isnan(only_nulls[0])  # an all-null object column: NaN as for numbers


def test_sum_of_ints_stays_integer_and_exact():
    values = np.array([2**53, 1, 1], dtype=np.int64)
    groups = np.zeros(3, dtype=np.int64)
    got = Sum().extract(Sum().add(values, groups, 1))
    assert int(got[0]) == 2**53 + 2


def test_empty_accumulators():
    n = 3
    assert np.isnan(Sum().extract(Sum().create(n))).all()
    assert Count().extract(Count().create(n)).tolist() == [0, 0, 0]
    assert np.isnan(Mean().extract(Mean().create(n))).all()
    assert np.isnan(np.asarray(Min().extract(Min().create(n)), dtype=float)).all()
    assert np.isnan(np.asarray(Max().extract(Max().create(n)), dtype=float)).all()
    assert [list(v) for v in ToList().extract(ToList().create(n))] == [[], [], []]
    assert [list(v) for v in TopK(2).extract(TopK(2).create(n))] == [[], [], []]
    assert [list(v) for v in ApproxQuantiles().extract(ApproxQuantiles().create(n))] == [[]] * 3
    assert ApproxDistinct().extract(ApproxDistinct().create(n)).tolist() == [0, 0, 0]


def test_count_ignores_values_including_nulls():
    values = np.array([None, np.nan, 1.0, "x"], dtype=object)
    groups = np.array([0, 0, 1, 1])
    assert Count().extract(Count().add(values, groups, 2)).tolist() == [2, 2]


def test_count_of_a_column_skips_nulls():
    values = np.array([None, np.nan, 1.0, "x"], dtype=object)
    groups = np.array([0, 0, 1, 1])
    fn = Count(skip_nulls=True)
    assert fn.extract(fn.add(values, groups, 2)).tolist() == [0, 2]


@pytest.mark.parametrize("seed", SEEDS)
def test_tolist_and_topk(seed):
    rng = np.random.default_rng(seed)
    values, groups = _data(rng, n=200)
    n = 7
    buckets = _by_group(values, groups, n)
    got = ToList().extract(_combine_in_chunks(ToList(), values, groups, n, rng))
    assert [sorted(v) for v in got] == [sorted(b) for b in buckets]
    for k in (1, 3, 50):
        top = TopK(k).extract(_combine_in_chunks(TopK(k), values, groups, n, rng))
        low = TopK(k, largest=False).extract(
            _combine_in_chunks(TopK(k, largest=False), values, groups, n, rng)
        )
        for i in range(n):
            assert list(top[i]) == sorted(buckets[i], reverse=True)[:k]
            assert list(low[i]) == sorted(buckets[i])[:k]


@pytest.mark.parametrize("seed", SEEDS)
def test_tolist_add_and_merge_keep_the_order_of_a_loop_per_value(seed):
    """ToList's vectorized add and merge against appending value by value: the
    same values, in arrival order, as tuples (which merges may share: they never
    change); its panes are new lists, shared with nothing."""
    rng = np.random.default_rng(seed)
    n = 9
    values = rng.integers(0, 100, 60).astype(object)
    groups = rng.integers(0, n - 2, 60)  # two groups never get a value
    want = [[] for _ in range(n)]
    for v, g in zip(values, groups, strict=True):
        want[g].append(v)
    added = ToList().add(values, groups, n)["values"]
    assert [list(v) for v in added] == want
    current = ToList().add(values[:30], groups[:30], n)["values"]
    fresh = ToList().add(values[30:], groups[30:], n)["values"]
    pos = np.r_[np.arange(n), np.arange(n)]
    merged = ToList().merge({"values": np.r_[current, fresh]}, pos, n)["values"]
    assert [list(v) for v in merged] == want
    assert all(type(v) is tuple for v in (*merged, *current, *fresh))
    panes = ToList().extract({"values": merged})
    assert all(type(v) is list for v in panes) and [list(v) for v in panes] == want
    assert not {id(v) for v in panes} & {id(v) for v in ToList().extract({"values": merged})}
    alone = ToList().merge({"values": current}, np.arange(n), n)["values"]
    assert [list(v) for v in alone] == [list(v) for v in current]
    shuffled = rng.permutation(2 * n)
    lists = list(np.r_[current, fresh][shuffled])  # a plain list of lists, as TopK gives
    merged = ToList().merge({"values": lists}, pos[shuffled], n)["values"]
    order = [[] for _ in range(n)]
    for g, lst in zip(pos[shuffled], lists, strict=True):
        order[g] = order[g] + list(lst)
    assert [list(v) for v in merged] == order


def test_tolist_keeps_lists_as_values():
    values = np.empty(3, dtype=object)
    values[0], values[1], values[2] = [1, 2], [3], []
    got = ToList().extract(ToList().add(values, np.array([0, 0, 1]), 2))
    assert [list(v) for v in got] == [[[1, 2], [3]], [[]]]


@pytest.mark.parametrize("distinct", [10_000, 40_000, 100_000])
def test_approx_distinct_error_within_5_percent(distinct):
    rng = np.random.default_rng(distinct)
    base = rng.permutation(distinct) + 10**9  # distinct ints, then duplicated
    values = np.r_[base, base[: distinct // 2], base[:100]]
    rng.shuffle(values)
    groups = np.zeros(len(values), dtype=np.int64)
    fn = ApproxDistinct()
    whole = fn.extract(fn.add(values, groups, 1))[0]
    assert abs(whole - distinct) / distinct < 0.05
    merged = fn.extract(_combine_in_chunks(fn, values, groups, 1, rng, chunks=6))[0]
    assert merged == whole  # HLL merge is exact: same registers


def test_approx_distinct_strings_small_and_grouped():
    fn = ApproxDistinct()
    words = np.array([f"user-{i}" for i in range(20_000)], dtype=object)
    groups = np.r_[np.zeros(5000), np.ones(15_000)].astype(np.int64)
    got = fn.extract(fn.add(np.r_[words, words[:5000]], np.r_[groups, groups[:5000]], 3))
    assert abs(got[0] - 5000) / 5000 < 0.05
    assert abs(got[1] - 15_000) / 15_000 < 0.05
    assert got[2] == 0
    small = fn.extract(fn.add(np.array(["a", "b", "c", "a"], dtype=object), np.zeros(4, int), 1))
    assert small[0] == 3  # linear counting is exact for tiny sets
    with pytest.raises(ValueError):
        ApproxDistinct(precision=3)


def _rank_error(data_sorted: np.ndarray, estimates, q: int) -> float:
    n = len(data_sorted)
    worst = 0.0
    for i, v in enumerate(estimates):
        target = i / (q - 1)
        lo = np.searchsorted(data_sorted, v, side="left") / n
        hi = np.searchsorted(data_sorted, v, side="right") / n
        # v is right if the target rank falls in [lo, hi]; otherwise the distance.
        worst = max(worst, max(lo - target, target - hi, 0.0))
    return worst


@pytest.mark.parametrize("seed", range(4))
def test_approx_quantiles_rank_error_single_add(seed):
    rng = np.random.default_rng(seed)
    data = rng.lognormal(0, 2, 50_000)
    fn = ApproxQuantiles(num_quantiles=11, capacity=512)
    est = fn.extract(fn.add(data, np.zeros(len(data), dtype=np.int64), 1))[0]
    s = np.sort(data)
    assert len(est) == 11
    assert est[-1] == s[-1]
    assert list(est) == sorted(est)
    assert _rank_error(s, est, 11) < 0.01


def test_approx_quantiles_first_output_is_the_exact_minimum():
    data = np.arange(1000, dtype=float)
    fn = ApproxQuantiles(num_quantiles=3, capacity=512)
    est = fn.extract(fn.add(data, np.zeros(1000, dtype=np.int64), 1))[0]
    assert list(est)[0] == 0.0 and list(est)[-1] == 999.0


def test_approx_quantiles_exact_when_small():
    data = np.arange(101, dtype=float)[::-1]
    fn = ApproxQuantiles(num_quantiles=5, capacity=512)
    est = fn.extract(fn.add(data, np.zeros(101, dtype=np.int64), 1))[0]
    assert list(est) == [0, 25, 50, 75, 100]
    with pytest.raises(ValueError):
        ApproxQuantiles(num_quantiles=1)


@pytest.mark.parametrize("seed", range(3))
def test_approx_quantiles_rank_error_after_many_merges(seed):
    """The Reducer merges each bundle into the window's accumulator: 200 bundles."""
    rng = np.random.default_rng(seed)
    data = rng.normal(0, 1, 40_000)
    fn = ApproxQuantiles(num_quantiles=11, capacity=512)
    acc = fn.create(1)
    for chunk in np.array_split(data, 200):
        part = fn.add(chunk, np.zeros(len(chunk), dtype=np.int64), 1)
        both = np.empty(2, dtype=object)
        both[0], both[1] = acc["sample"][0], part["sample"][0]
        acc = fn.merge({"sample": both}, np.zeros(2, dtype=np.int64), 1)
    est = fn.extract(acc)[0]
    s = np.sort(data)
    assert est[-1] == s[-1]
    # Over seeds 0-29 the worst rank error is 0.030 (mean 0.019); it was 0.034
    # with the earlier RNG coins, whose seeds 0-2 happened to stay below 0.02.
    assert _rank_error(s, est, 11) < 0.035


# ------------------------------------------------------------- inverses
def _acc_rows(acc, rows):
    return {f: a[rows] for f, a in acc.items()}


@pytest.mark.parametrize("fn", [Sum(), Count(), Mean()], ids=repr)
@pytest.mark.parametrize("seed", range(6))
def test_subtract_is_the_inverse_of_merge(fn, seed):
    assert fn.has_inverse
    rng = np.random.default_rng(seed)
    values, groups = _data(rng, floats=isinstance(fn, Mean))
    n = 7
    keep = rng.random(len(values)) < 0.6
    a = fn.add(values[keep], groups[keep], n)
    b = fn.add(values[~keep], groups[~keep], n)
    whole = fn.add(values, groups, n)
    got = fn.extract(fn.subtract(whole, b))
    want = fn.extract(a)
    np.testing.assert_allclose(
        np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-9, atol=1e-9
    )


@pytest.mark.parametrize("fn", [Min(), Max(), ToList(), TopK(3), ApproxDistinct()], ids=repr)
def test_no_inverse_declared_and_subtract_refuses(fn):
    assert not fn.has_inverse
    with pytest.raises(NotImplementedError):
        fn.subtract(fn.create(1), fn.create(1))


def test_named_combiners():
    assert set(COMBINERS) >= {"sum", "count", "mean", "min", "max", "list"}
    assert COMBINERS["avg"] is Mean


# ------------------------------------------------- a user scalar CombineFn
class SpreadFn(CombineFn):
    """max - min and the count, written only with Beam's scalar methods."""

    name = "spread"

    def create_accumulator(self):
        return (math.inf, -math.inf, 0)

    def add_input(self, accumulator, value):
        lo, hi, n = accumulator
        return (min(lo, value), max(hi, value), n + 1)

    def merge_accumulators(self, accumulators):
        los, his, ns = zip(*accumulators, strict=True)
        return (min(los), max(his), sum(ns))

    def extract_output(self, accumulator):
        lo, hi, n = accumulator
        return (hi - lo if n else None, n)


def test_scalar_combine_fn_vectorized_defaults():
    fn = SpreadFn()
    values = np.array([5, 1, 9, 4, 4], dtype=np.int64)
    groups = np.array([0, 0, 0, 2, 2])
    assert list(fn.extract(fn.add(values, groups, 3))) == [(8, 3), (None, 0), (0, 2)]
    rng = np.random.default_rng(0)
    values, groups = _data(rng, n=300)
    buckets = _by_group(values, groups, 7)
    got = fn.extract(_combine_in_chunks(fn, values, groups, 7, rng))
    for i in range(7):
        b = buckets[i]
        assert got[i] == ((max(b) - min(b), len(b)) if b else (None, 0))


@pytest.mark.parametrize("seed", range(5))
def test_scalar_combine_fn_through_the_reducer(seed):
    rng = np.random.default_rng(seed)
    n = 500
    df = pd.DataFrame(
        {
            "key": rng.choice(["a", "b", 7], n),
            "timestamp": rng.integers(0, 60_000, n),
            "x": rng.integers(-50, 50, n),
        }
    )
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterCount(7)), "accumulating")
    r = Reducer(strategy, {"spread": (SpreadFn(), "x"), "total": (Sum(), "x")})
    panes = []
    for chunk in np.array_split(np.arange(n), 40):
        part = df.iloc[chunk]
        panes.append(r.add_bundle(part["key"], part["timestamp"], part[["x"]], now=0).panes)
    panes.append(r.advance_watermark(MAX_TIMESTAMP).panes)
    out = pd.concat([p for p in panes if len(p)], ignore_index=True)
    last = out.sort_values("pane_index").groupby(["key", "window_start"]).tail(1)
    df["window_start"] = df["timestamp"] // 10_000 * 10_000
    want = df.groupby(["key", "window_start"])["x"].agg(["min", "max", "count", "sum"])
    assert len(last) == len(want)
    for _, row in last.iterrows():
        w = want.loc[(row["key"], row["window_start"])]
        assert row["spread"] == (w["max"] - w["min"], w["count"])
        assert row["total"] == w["sum"]


@pytest.mark.parametrize("mode", ["accumulating", "discarding", "retracting"])
def test_object_accumulators_through_the_reducer_with_session_merges(mode):
    """List-like and sketch accumulators survive session merges and snapshots."""
    rng = np.random.default_rng(len(mode))
    strategy = WindowingStrategy.of(Sessions(3), Repeatedly(AfterCount(4)), mode)
    aggs = {
        "values": (ToList(), "x"),
        "top": (TopK(3), "x"),
        "distinct": (ApproxDistinct(), "x"),
        "q": (ApproxQuantiles(num_quantiles=3), "x"),
        "n": (Count(), None),
    }
    r = Reducer(strategy, aggs)
    out = []
    for step in range(60):
        m = int(rng.integers(1, 4))
        ts = rng.integers(0, 200_000, m)
        x = rng.integers(0, 30, m)
        out.append(r.add_bundle(list(rng.choice(["a", "b"], m)), ts, pd.DataFrame({"x": x})))
        if step % 10 == 9:
            r = Reducer.restore(strategy, aggs, r.snapshot())
    out.append(r.advance_watermark(MAX_TIMESTAMP))
    panes = pd.concat([e.panes for e in out if len(e.panes)], ignore_index=True)
    assert len(panes) > 20
    for p in panes.to_dict("records"):
        vals = sorted(int(v) for v in p["values"])
        assert len(vals) == p["n"]
        assert [int(v) for v in p["top"]] == vals[::-1][:3]
        assert abs(int(p["distinct"]) - len(set(vals))) <= 1
        if vals:
            q = [float(v) for v in p["q"]]
            assert q[0] == vals[0] and q[-1] == vals[-1] and vals[0] <= q[1] <= vals[-1]


@pytest.mark.parametrize(
    "values",
    [
        [1_700_000_000_123_456_789, 1_700_000_000_123_456_790],
        ["pear", "apple", "zebra"],
    ],
    ids=["int64-ns", "strings"],
)
def test_min_max_through_the_reducer_keep_type_and_value(values):
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterCount(1)), "accumulating")
    r = Reducer(strategy, {"lo": (Min(), "v"), "hi": (Max(), "v")})
    for v in values:
        p = r.add_bundle(["k"], [1000], pd.DataFrame({"v": [v]})).panes
    lo, hi = p["lo"].iloc[-1], p["hi"].iloc[-1]
    assert not isinstance(lo, (float, np.floating))
    assert (lo, hi) == (min(values), max(values))


@pytest.mark.parametrize("how", ["min", "max"])
@pytest.mark.parametrize("kind", ["text", "decimal", "bool"])
def test_grouped_extremes_of_objects_equal_pandas(kind: str, how: str) -> None:
    """Min and max of Python objects by one sort (no loop per group) give pandas'
    grouped min and max, groups without input left empty."""
    from decimal import Decimal

    rng = np.random.default_rng(7)
    for _ in range(50):
        n, m = int(rng.integers(1, 12)), int(rng.integers(1, 80))
        groups = rng.integers(0, n, m)
        if kind == "text":
            values = [str(v) for v in rng.choice(["a", "b", "ab", "", "Z", "é", "aa"], m)]
        elif kind == "decimal":
            values = [Decimal(int(x)) / 7 for x in rng.integers(-50, 50, m)]
        else:
            values = [bool(x) for x in rng.integers(0, 2, m)]
        values = np.array(values, dtype=object)
        fn = Min() if how == "min" else Max()
        got = np.asarray(fn.add(values, groups, n)[how], dtype=object)
        got = np.where(np.bincount(groups, minlength=n) > 0, got, None)
        ref = getattr(pd.Series(values, dtype=object).groupby(groups), how)()
        expected = np.empty(n, dtype=object)
        expected[ref.index.to_numpy()] = ref.to_numpy()
        assert got.tolist() == expected.tolist()


def test_occurrences_equal_pandas_cumcount() -> None:
    from headwater.model.combiners import occurrences

    rng = np.random.default_rng(7)
    keys = rng.integers(0, 5, 200).astype(np.uint64)
    expected = pd.Series(keys).groupby(keys).cumcount().to_numpy()
    assert occurrences(keys).tolist() == expected.tolist()
    assert occurrences(np.array([], dtype=np.uint64)).tolist() == []


def _distinct_inputs(kind: str, rng: np.random.Generator, m: int) -> np.ndarray:
    """``m`` values of one kind, with repeats (and nulls where the kind has them)."""
    ints = rng.integers(0, 40, m)
    if kind == "int":
        return ints
    if kind == "float":
        return np.where(ints % 9 == 0, np.nan, ints / 4)
    if kind == "text":
        return np.array([None if i % 11 == 0 else f"v{i}" for i in ints], dtype=object)
    return (ints * 1_000_000).astype("datetime64[ms]")  # times


@pytest.mark.parametrize("kind", ["int", "float", "text", "time"])
@pytest.mark.parametrize("seed", range(4))
def test_count_distinct_over_steps_equals_pandas_nunique(kind, seed):
    """The reducer's use: each step adds its values, merges them into the groups'
    sets in place, and now and then the sets go through the state's Arrow form."""
    rng = np.random.default_rng(seed)
    fn, n = CountDistinct(), 7
    acc = fn.create(n)["distinct"]
    seen_values, seen_groups = [], []
    for step in range(12):
        m = int(rng.integers(0, 30))
        values, groups = _distinct_inputs(kind, rng, m), rng.integers(0, n, m)
        seen_values.append(values)
        seen_groups.append(groups)
        new = fn.add(values, groups, n)["distinct"]
        acc = fn.merge({"distinct": np.r_[acc, new]}, np.r_[np.arange(n), np.arange(n)], n)
        acc = acc["distinct"]
        if step % 3 == 2:
            arrow = fn.accumulator_to_arrow("distinct", acc)
            acc = fn.accumulator_from_arrow("distinct", arrow)
        frame = pd.DataFrame({"v": np.concatenate(seen_values), "g": np.concatenate(seen_groups)})
        want = frame.groupby("g")["v"].nunique().reindex(range(n), fill_value=0)
        assert fn.extract({"distinct": acc}).tolist() == want.tolist()
    # plain values: nothing the cycle collector walks at each full collection
    assert not any(map(gc.is_tracked, acc))


def test_count_distinct_merges_many_parts_per_group():
    """Merging windows (sessions) merges several accumulators into one group."""
    fn = CountDistinct()
    parts = fn.add(np.array([1, 2, 2, 3, 4, 1, 5]), np.array([0, 1, 2, 3, 4, 5, 6]), 7)
    merged = fn.merge(parts, np.array([0, 0, 0, 1, 1, 0, 1]), 2)
    assert fn.extract(merged).tolist() == [2, 3]  # {1, 2}, {3, 4, 5}
    assert fn.extract(fn.merge(fn.create(0), np.zeros(0, np.int64), 3)).tolist() == [0, 0, 0]


def test_count_distinct_reads_the_earlier_state_form():
    """State written when the accumulator was a numpy array per window (times kept
    as times) reads back as sets that new values of the same kind match."""
    fn = CountDistinct()
    times = np.array([1_000, 2_000], dtype="datetime64[ms]")
    old = [times, np.empty(0), times[:1]]
    back = fn.accumulator_from_arrow("distinct", arrow_values.ndarrays_to_arrow(old))
    more = fn.add(np.array([2_000, 3_000], dtype="datetime64[ms]"), np.array([0, 2]), 3)
    merged = fn.merge({"distinct": np.r_[back, more["distinct"]]}, np.arange(6) % 3, 3)
    assert fn.extract(merged).tolist() == [2, 0, 2]
    words = arrow_values.ndarrays_to_arrow([np.array(["a", "b"]), np.array(["a"])])
    assert fn.extract({"distinct": fn.accumulator_from_arrow("d", words)}).tolist() == [2, 1]
