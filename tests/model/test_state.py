"""The versioned state format (headwater.model.state): round trips, legacy, refusal."""

from __future__ import annotations

import math
import pickle
import struct

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headwater.model import arrow_values, state
from headwater.model.combiners import (
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
from headwater.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark, Repeatedly
from headwater.model.window_table import acc_column, last_column, split_acc_column
from headwater.model.windows import FixedWindows, Sessions


class Spread(CombineFn):
    """A user combiner with scalar methods and a tuple accumulator (the escape hatch)."""

    name = "spread"

    def create_accumulator(self):
        return (math.inf, -math.inf, 0)

    def add_input(self, acc, value):
        return (min(acc[0], value), max(acc[1], value), acc[2] + 1)

    def merge_accumulators(self, accs):
        return (min(a[0] for a in accs), max(a[1] for a in accs), sum(a[2] for a in accs))

    def extract_output(self, acc):
        return (acc[1] - acc[0], acc[2]) if acc[2] else (None, 0)


class Total(CombineFn):
    """A user combiner whose accumulator is a plain int: no pickle needed."""

    def create_accumulator(self):
        return 0

    def add_input(self, acc, value):
        return acc + int(value)

    def merge_accumulators(self, accs):
        return sum(accs)

    def extract_output(self, acc):
        return acc


# ------------------------------------------------------------------ helpers
def plain(v):
    """Values compared by content: numpy scalars and containers made plain."""
    if isinstance(v, np.ndarray):
        return ("array", [plain(x) for x in v.tolist()])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [plain(x) for x in v])
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def exact(a, b) -> bool:
    """Same value and same kind (array dtype, list vs tuple, str vs int)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            # str arrays: the same kind; numpy's width of a trimmed row is not kept
            and (a.dtype == b.dtype or a.dtype.kind == b.dtype.kind == "U")
            and a.shape == b.shape
            and all(exact(x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True))
        )
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(exact(x, y) for x, y in zip(a, b, strict=True))
        )
    kind = {bool: "b", np.bool_: "b", str: "s", np.str_: "s", type(None): "n"}
    if kind.get(type(a), "num") != kind.get(type(b), "num"):
        return False
    return plain(a) == plain(b)


def assert_same_state(r1: Reducer, r2: Reducer) -> None:
    t1, t2 = r1._table, r2._table
    assert list(t1.keys) == list(t2.keys) or set(t1.keys) >= set(t2.keys)
    k1 = t1.decode_keys(t1.cols["key"]).tolist()
    k2 = t2.decode_keys(t2.cols["key"]).tolist()
    assert [(type(k), k) for k in k1] == [(type(k), k) for k in k2]
    assert list(t1.cols) == list(t2.cols)
    for name, a in t1.cols.items():
        b = t2.cols[name]
        if name == "key":
            continue
        if a.dtype != object:
            assert a.dtype == b.dtype and np.array_equal(a, b), name
            assert b.flags.writeable, name
        elif split_acc_column(name) is not None:
            assert b.dtype == object and all(exact(x, y) for x, y in zip(a, b, strict=True)), name
        else:
            assert [plain(x) for x in a] == [plain(x) for x in b], name
    assert (r1.watermark, r1.now, r1.dropped_count) == (r2.watermark, r2.now, r2.dropped_count)
    q1, q2 = r1._queue.frame, r2._queue.frame
    assert list(q1.columns) == list(q2.columns) and len(q1) == len(q2)
    for c in q1.columns:
        assert [plain(x) for x in q1[c]] == [plain(x) for x in q2[c]], c


def records(panes: pd.DataFrame) -> list:
    return [{k: plain(v) for k, v in r.items()} for r in panes.to_dict("records")]


def run_steps(strategy, aggs, steps, restore_every: int | None):
    """Every step's panes; with ``restore_every``, a snapshot/restore between steps."""
    r = Reducer(strategy, aggs)
    out = []
    for i, (kind, arg) in enumerate(steps):
        if kind == "input":
            keys, ts, x = arg
            em = r.add_bundle(keys, ts, pd.DataFrame({"x": x}))
        elif kind == "wm":
            em = r.advance_watermark(arg)
        else:
            em = r.advance_clock(arg)
        out.append(records(em.panes))
        if restore_every and i % restore_every == 0:
            r2 = Reducer.restore(strategy, aggs, r.snapshot())
            assert_same_state(r, r2)
            r = r2
    out.append(records(r.advance_watermark(MAX_TIMESTAMP).panes))
    return out


def random_steps(seed: int, keys, n=40, values=None):
    rng = np.random.default_rng(seed)
    steps, wm, clock = [], 0, 0
    for _ in range(n):
        u = rng.random()
        if u < 0.65:
            m = int(rng.integers(1, 30))
            ks = [keys[i] for i in rng.integers(0, len(keys), m)]
            ts = (wm + rng.integers(-15_000, 40_000, m)).clip(0)
            x = values(rng, m) if values else rng.integers(-100, 100, m)
            steps.append(("input", (ks, ts, x)))
        elif u < 0.85:
            wm += int(rng.integers(1, 10_000))
            steps.append(("wm", wm))
        else:
            clock += int(rng.integers(1, 5_000))
            steps.append(("clock", clock))
    return steps


ALL_BUILTINS = {
    "sum": (Sum(), "x"),
    "count": (Count(), None),
    "mean": (Mean(), "x"),
    "min": (Min(), "x"),
    "max": (Max(), "x"),
    "values": (ToList(), "x"),
    "top": (TopK(3), "x"),
    "distinct": (ApproxDistinct(precision=6), "x"),
    "exact_distinct": (CountDistinct(), "x"),
    "q": (ApproxQuantiles(num_quantiles=4, capacity=8), "x"),
}


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("mode", ["discarding", "accumulating", "retracting"])
@pytest.mark.parametrize("window_fn", [FixedWindows(10), Sessions(5)], ids=repr)
def test_every_builtin_combiner_round_trips_exactly(mode, window_fn):
    trigger = AfterWatermark(early=AfterProcessingTime(2), late=AfterCount(3))
    strategy = WindowingStrategy.of(window_fn, trigger, mode, 20)
    steps = random_steps(1, ["a", "b", "c"])
    straight = run_steps(strategy, ALL_BUILTINS, steps, None)
    restored = run_steps(strategy, ALL_BUILTINS, steps, 1)
    assert straight == restored
    assert sum(len(p) for p in straight) > 20


def test_string_min_max_and_lists_of_strings_round_trip():
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterCount(5)), "retracting", 5)
    aggs = {
        "lo": (Min(), "x"),
        "hi": (Max(), "x"),
        "values": (ToList(), "x"),
        "top": (TopK(2, largest=False), "x"),
    }
    words = np.array(["pear", "fig", "apple", "kiwi", "lime", ""])
    steps = random_steps(2, ["a", "b"], values=lambda rng, m: words[rng.integers(0, 6, m)])
    assert run_steps(strategy, aggs, steps, None) == run_steps(strategy, aggs, steps, 1)


@pytest.mark.parametrize(
    "keys", [["a", "b", "ü"], [1, 2, -(2**40)], ["a", 1, "1", True]], ids=["str", "int", "mixed"]
)
def test_keys_keep_their_type(keys):
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterCount(4)), "accumulating", 5)
    aggs = {"sum": (Sum(), "x")}
    steps = random_steps(3, keys)
    straight = run_steps(strategy, aggs, steps, None)
    assert straight == run_steps(strategy, aggs, steps, 1)
    r = Reducer(strategy, aggs)
    r.add_bundle(keys, [1000] * len(keys), pd.DataFrame({"x": range(len(keys))}))
    r2 = Reducer.restore(strategy, aggs, r.snapshot())
    assert [(type(k), k) for k in r2._table.keys] == [(type(k), k) for k in r._table.keys]


def test_queued_session_retractions_round_trip():
    strategy = WindowingStrategy.of(Sessions(10), Repeatedly(AfterCount(2)), "retracting")
    aggs = {"values": (ToList(), "x"), "sum": (Sum(), "x")}
    r = Reducer(strategy, aggs)
    r.add_bundle(["k", "k"], [0, 1000], pd.DataFrame({"x": [1, 2]}))
    r.add_bundle(["other"], [50_000], pd.DataFrame({"x": [3]}))
    r.add_bundle(["k"], [5000], pd.DataFrame({"x": [4]}))  # queues the retraction of [0, 11)
    assert len(r._queue) == 1
    blob = r.snapshot()
    assert blob.startswith(state.MAGIC)
    r2 = Reducer.restore(strategy, aggs, blob)
    assert_same_state(r, r2)
    em = r2.add_bundle(["k"], [14_000], pd.DataFrame({"x": [5]}))
    got = em.panes[["window_start", "window_end", "values", "sum", "is_retraction"]]
    assert got.values.tolist() == [
        [0, 11_000, [1, 2], 3, True],
        [0, 24_000, [1, 2, 4, 5], 12, False],
    ]


def test_user_scalar_combiner_uses_the_flagged_escape_hatch_only_when_needed():
    strategy = WindowingStrategy.of(Sessions(5), Repeatedly(AfterCount(3)), "retracting", 10)
    aggs = {"spread": (Spread(), "x"), "total": (Total(), "x"), "sum": (Sum(), "x")}
    steps = random_steps(4, ["a", "b"])
    assert run_steps(strategy, aggs, steps, None) == run_steps(strategy, aggs, steps, 1)
    r = Reducer(strategy, aggs)
    r.add_bundle(["a", "a", "a", "b"], [1000, 1500, 2000, 2000], pd.DataFrame({"x": [1, 2, 3, 4]}))
    windows = _sections(r.snapshot())[0]
    pickled = {
        f.name for f in windows.schema if isinstance(f.type, arrow_values.PickledType)
    }  # the tuple accumulator and its (tuple) last pane value
    assert pickled == {acc_column("spread", "acc"), last_column("spread")}
    assert windows.schema.field(acc_column("total", "acc")).type == pa.int64()
    assert windows.schema.field(acc_column("sum", "sum")).type == pa.int64()


def test_builtin_combiners_never_pickle():
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterCount(2)), "retracting")
    r = Reducer(strategy, ALL_BUILTINS)
    r.add_bundle(["a", "b", "a"], [1000, 2000, 3000], pd.DataFrame({"x": [1, 2, 3]}))
    r.add_bundle(["a"], [4000], pd.DataFrame({"x": [4]}))
    for table in _sections(r.snapshot()):
        for f in table.schema:
            assert not isinstance(f.type, arrow_values.PickledType), f.name
    assert r.snapshot()[:8] == state.MAGIC


def test_empty_reducer_round_trips():
    strategy = WindowingStrategy.of(FixedWindows(10))
    r = Reducer(strategy, ALL_BUILTINS)
    r.advance_watermark(5000)
    r2 = Reducer.restore(strategy, ALL_BUILTINS, r.snapshot())
    assert len(r2) == 0 and r2.watermark == 5000
    assert Reducer.restore(strategy, None, None).watermark == r.__class__(strategy).watermark


# ------------------------------------------------------------------ versions
def _sections(blob: bytes) -> list[pa.Table]:
    pos, out = 12, []
    for _ in range(3):
        (n,) = struct.unpack_from("<Q", blob, pos)
        pos += 8
        out.append(pa.ipc.open_stream(pa.py_buffer(blob[pos : pos + n])).read_all())
        pos += n
    return out


def test_layout_matches_the_documentation():
    strategy = WindowingStrategy.of(FixedWindows(10))
    r = Reducer(strategy, {"sum": (Sum(), "x")})
    r.add_bundle(["a"], [1000], pd.DataFrame({"x": [7]}))
    blob = r.snapshot()
    assert blob[:8] == b"HWSTATE\x00"
    assert struct.unpack_from("<I", blob, 8) == (state.FORMAT_VERSION,)
    windows, keys, queue = _sections(blob)
    assert set(windows.column_names) == set(r._table.cols)
    meta = windows.schema.metadata
    assert meta[b"headwater.watermark"] == str(r.watermark).encode()
    assert meta[b"headwater.format_version"] == b"1"
    assert keys.column("key").to_pylist() == ["a"]
    assert queue.num_columns == 0


def legacy_snapshot(r: Reducer) -> bytes:
    """The version 0 blob (headwater before the format): a pickle, without the
    columns added since (the rule-1 ``ontime_data``)."""
    live = np.unique(r._table.cols["key"])
    remap = np.full(len(r._table.keys), -1, dtype=np.int64)
    remap[live] = np.arange(len(live))
    cols = {k: v for k, v in r._table.cols.items() if k != "ontime_data"}
    cols["key"] = remap[cols["key"]]
    return pickle.dumps(
        {
            "keys": r._table.decode_keys(live),
            "cols": cols,
            "queue": r._queue.frame.copy(),
            "watermark": r.watermark,
            "now": r.now,
            "dropped": r.dropped_count,
        },
        protocol=5,
    )


def test_version_0_pickle_is_read_and_converted():
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterCount(3)), "accumulating", 30)
    aggs = {"sum": (Sum(), "x"), "values": (ToList(), "x")}
    r = Reducer(strategy, aggs)
    r.add_bundle(["a", "a", "b"], [1000, 2000, 3000], pd.DataFrame({"x": [1, 2, 3]}))
    r.advance_watermark(12_000)
    r.dropped_count = 4
    blob = legacy_snapshot(r)
    assert blob[:1] == b"\x80"
    r2 = Reducer.restore(strategy, aggs, blob)
    assert (r2.watermark, r2.dropped_count) == (12_000, 4)
    # The on-time data pending in the old state counts as on time (a default
    # that keeps the old labelling): a late element completes the count.
    assert r2._table.cols["ontime_data"].tolist() == [True, True]
    em = r2.add_bundle(["a"], [3000], pd.DataFrame({"x": [10]}))
    assert em.panes[["key", "sum", "values", "timing"]].values.tolist() == [
        ["a", 13, [1, 2, 10], "ON_TIME"]
    ]
    # And it is written back in the current format.
    assert r2.snapshot()[:8] == state.MAGIC


def test_unknown_version_is_refused_with_a_clear_error():
    strategy = WindowingStrategy.of(FixedWindows(10))
    blob = bytearray(Reducer(strategy).snapshot())
    struct.pack_into("<I", blob, 8, 7)
    with pytest.raises(state.StateFormatError) as e:
        Reducer.restore(strategy, None, bytes(blob))
    assert str(e.value) == (
        "state format version 7 is not readable by headwater 0.1.0 (reads versions 0-1); "
        "restart the query from a new checkpoint or upgrade headwater"
    )
    with pytest.raises(state.StateFormatError, match="magic"):
        Reducer.restore(strategy, None, b"not a state blob")


# ------------------------------------------------------------------ sketches
@pytest.mark.parametrize(
    "fn",
    [ApproxQuantiles(num_quantiles=5, capacity=16), ApproxDistinct(precision=5)],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["discarding", "accumulating", "retracting"])
def test_sketches_restored_mid_stream_continue_identically(fn, mode):
    strategy = WindowingStrategy.of(Sessions(8), Repeatedly(AfterCount(25)), mode, 30)
    aggs = {"s": (fn, "x")}
    steps = random_steps(5, ["a", "b"], n=60, values=lambda rng, m: rng.normal(0, 10, m))
    straight = run_steps(strategy, aggs, steps, None)
    for every in (1, 7):
        assert run_steps(strategy, aggs, steps, every) == straight
    assert sum(len(p) for p in straight) > 5


def test_approx_quantiles_is_deterministic_whatever_ran_before():
    rng = np.random.default_rng(0)
    data = rng.normal(0, 1, 5000)
    groups = np.zeros(len(data), dtype=np.int64)
    fresh = ApproxQuantiles(capacity=64)
    used = ApproxQuantiles(capacity=64)
    used.add(rng.normal(0, 1, 3000), np.zeros(3000, dtype=np.int64), 1)  # some history
    a, b = fresh.add(data, groups, 1)["sample"][0], used.add(data, groups, 1)["sample"][0]
    assert exact(a, b)
    # Input order does not matter either: the sketch depends on the multiset.
    c = fresh.add(data[::-1].copy(), groups, 1)["sample"][0]
    assert exact(a, c)
    assert len(a[0]) <= 64 and a[1].sum() == len(data)
