"""Window functions against brute-force, per-element computations."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections import defaultdict

import numpy as np
import pytest

from headwater.model.time import GLOBAL_WINDOW_END, MIN_TIMESTAMP
from headwater.model.windows import (
    CalendarWindows,
    CumulativeWindows,
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    ValidityWindows,
)

SEEDS = range(20)


def _assigned(window_fn, ts) -> set[tuple[int, int, int]]:
    row, start, end = window_fn.assign(np.asarray(ts, dtype=np.int64))
    assert len(row) == len(start) == len(end)
    out = {(int(r), int(s), int(e)) for r, s, e in zip(row, start, end, strict=True)}
    assert len(out) == len(row), "a window was assigned twice to one element"
    return out


def _random_ts(rng, n=300):
    return np.r_[
        rng.integers(-5_000_000, 5_000_000, n),
        [0, -1, 1, 999, 1000, -1000, -999, -1001],
    ].astype(np.int64)


# ----------------------------------------------------------------- global
def test_global_windows():
    ts = np.array([-(10**12), 0, 10**12], dtype=np.int64)
    assert _assigned(GlobalWindows(), ts) == {
        (i, MIN_TIMESTAMP, GLOBAL_WINDOW_END) for i in range(3)
    }


# ------------------------------------------------------------------ fixed
def _fixed_brute(t: int, size: int, offset: int) -> tuple[int, int]:
    k = (t - offset) // size  # Python floor division: correct for negatives
    start = offset + k * size
    while start > t:
        start -= size
    while start + size <= t:
        start += size
    assert start <= t < start + size
    return start, start + size


@pytest.mark.parametrize("seed", SEEDS)
def test_fixed_windows_vs_brute_force(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 100_000))
    offset = int(rng.integers(-3 * size, 3 * size))
    ts = _random_ts(rng)
    # Offsets are given in seconds to the constructor.
    fn = FixedWindows(size / 1000, offset / 1000)
    expected = {(i, *_fixed_brute(int(t), size, offset)) for i, t in enumerate(ts)}
    assert _assigned(fn, ts) == expected


def test_fixed_windows_examples():
    fn = FixedWindows(10, 3)  # seconds: [3, 13), [13, 23), [-7, 3) ...
    got = _assigned(fn, [3000, 2999, 12_999, 13_000, -7000, -7001])
    assert got == {
        (0, 3000, 13_000),
        (1, -7000, 3000),
        (2, 3000, 13_000),
        (3, 13_000, 23_000),
        (4, -7000, 3000),
        (5, -17_000, -7000),
    }
    # An offset of a whole multiple of the size is no offset.
    assert _assigned(FixedWindows(10, 20), [5000]) == {(0, 0, 10_000)}
    assert _assigned(FixedWindows("1 minute"), [61_000]) == {(0, 60_000, 120_000)}


# ---------------------------------------------------------------- sliding
def _sliding_brute(t: int, size: int, period: int, offset: int) -> set[tuple[int, int]]:
    out = set()
    k = (t - offset) // period
    for j in range(k - size // period - 3, k + 3):
        start = offset + j * period
        if start <= t < start + size:
            out.add((start, start + size))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_sliding_windows_vs_brute_force(seed):
    rng = np.random.default_rng(seed)
    period = int(rng.integers(1, 20_000))
    # Sizes that are multiples of the period, not multiples, and smaller than it (gaps).
    size = int(rng.choice([period * int(rng.integers(1, 6)), int(rng.integers(1, 5 * period))]))
    offset = int(rng.integers(-2 * period, 2 * period))
    ts = _random_ts(rng)
    fn = SlidingWindows(size / 1000, period / 1000, offset / 1000)
    expected = {
        (i, s, e) for i, t in enumerate(ts) for s, e in _sliding_brute(int(t), size, period, offset)
    }
    assert _assigned(fn, ts) == expected


def test_sliding_windows_examples():
    fn = SlidingWindows(10, 5)
    assert _assigned(fn, [7000]) == {(0, 0, 10_000), (0, 5000, 15_000)}
    assert _assigned(fn, [-1]) == {(0, -10_000, 0), (0, -5000, 5000)}
    # size 7, period 5: 6 s is in [0, 7) and [5, 12); 8 s only in [5, 12)
    fn = SlidingWindows(7, 5)
    assert _assigned(fn, [6000, 8000]) == {(0, 0, 7000), (0, 5000, 12_000), (1, 5000, 12_000)}
    # size 3 < period 5: gaps between windows
    fn = SlidingWindows(3, 5, 1)
    assert _assigned(fn, [1000, 3999, 4000, 5999]) == {(0, 1000, 4000), (1, 1000, 4000)}


# ------------------------------------------------------------- cumulative
def _cumulative_brute(t: int, step: int, size: int, offset: int) -> set[tuple[int, int]]:
    """Every window ``[p, p + m*step)`` of every period start ``p`` that holds ``t``."""
    out = set()
    k = (t - offset) // size
    for j in range(k - 2, k + 3):
        start = offset + j * size
        for m in range(1, size // step + 1):
            if start <= t < start + m * step:
                out.add((start, start + m * step))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_cumulative_windows_vs_brute_force(seed):
    rng = np.random.default_rng(seed)
    step = int(rng.integers(1, 20_000))
    size = step * int(rng.integers(1, 8))
    offset = int(rng.integers(-2 * size, 2 * size))
    ts = _random_ts(rng)
    fn = CumulativeWindows(step / 1000, size / 1000, offset / 1000)
    expected = {
        (i, s, e)
        for i, t in enumerate(ts)
        for s, e in _cumulative_brute(int(t), step, size, offset)
    }
    assert _assigned(fn, ts) == expected


def test_cumulative_windows_examples():
    # Flink's example: step 2 min, size 10 min; 08:05 -> [08:00, 08:06) ... [08:00, 08:10)
    minute = 60_000
    fn = CumulativeWindows(dt.timedelta(minutes=2), dt.timedelta(minutes=10))
    assert _assigned(fn, [5 * minute]) == {(0, 0, e * minute) for e in (6, 8, 10)}
    # a step's end is exclusive: 4 min is in [0, 6), not in [0, 4); the period ends at 10
    assert _assigned(fn, [4 * minute - 1, 10 * minute - 1]) == {
        *((0, 0, e * minute) for e in (4, 6, 8, 10)),
        (1, 0, 10 * minute),
    }
    assert _assigned(fn, [-1]) == {(0, -10 * minute, 0)}
    # offset 3 min: periods [3, 13), [13, 23) ...
    fn = CumulativeWindows(120, 600, 180)
    ends = (15, 17, 19, 21, 23)
    assert _assigned(fn, [14 * minute]) == {(0, 13 * minute, e * minute) for e in ends}
    assert _assigned(CumulativeWindows(1, 5), []) == set()


def test_cumulative_windows_need_a_step_that_divides_the_size():
    with pytest.raises(ValueError, match="must divide"):
        CumulativeWindows(3, 10)


# --------------------------------------------------------------- sessions
def _union_find_sessions(keys, starts, ends):
    """Connected components of the 'overlaps' graph (quadratic, obviously right)."""
    n = len(keys)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if keys[i] == keys[j] and starts[i] < ends[j] and starts[j] < ends[i]:
                parent[find(i)] = find(j)
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    for i in range(n):
        r = find(i)
        lo[r] = min(lo.get(r, starts[i]), starts[i])
        hi[r] = max(hi.get(r, ends[i]), ends[i])
    # One component may become overlapping with another only through its union:
    # iterate until stable.
    comps = {(keys[i], lo[find(i)], hi[find(i)]) for i in range(n)}
    changed = True
    while changed:
        changed = False
        comps_l = sorted(comps)
        for a in comps_l:
            for b in comps_l:
                if a < b and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]:
                    comps = (comps - {a, b}) | {(a[0], min(a[1], b[1]), max(a[2], b[2]))}
                    changed = True
                    break
            if changed:
                break
    out = []
    for i in range(n):
        (match,) = [c for c in comps if c[0] == keys[i] and c[1] <= starts[i] and ends[i] <= c[2]]
        out.append((match[1], match[2]))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_sessions_merge_vs_union_find(seed):
    rng = np.random.default_rng(seed)
    n = 120
    gap = int(rng.integers(1, 5000))
    fn = Sessions(gap / 1000)
    keys = rng.integers(0, 4, n).astype(np.int64)
    ts = rng.integers(-50_000, 50_000, n).astype(np.int64)
    row, s, e = fn.assign(ts)
    assert (row == np.arange(n)).all() and (s == ts).all() and (e == ts + gap).all()
    # Merge also works on already-merged (wider) windows: widen some at random.
    e = e + rng.integers(0, 3, n) * gap
    got_s, got_e = fn.merge(keys, s.copy(), e.copy())
    expected = _union_find_sessions(keys.tolist(), s.tolist(), e.tolist())
    assert list(zip(got_s.tolist(), got_e.tolist(), strict=True)) == expected
    assert fn.is_merging


def test_sessions_touching_windows_stay_apart():
    fn = Sessions(10)
    s = np.array([0, 10_000, 19_999], dtype=np.int64)
    e = s + 10_000
    got_s, got_e = fn.merge(np.zeros(3, dtype=np.int64), s, e)
    assert got_s.tolist() == [0, 10_000, 10_000]
    assert got_e.tolist() == [10_000, 29_999, 29_999]


# --------------------------------------------------------------- validity
@pytest.mark.parametrize("seed", range(10))
def test_validity_windows_vs_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 80
    fn = ValidityWindows()
    keys = rng.integers(0, 3, n).astype(np.int64)
    ts = rng.integers(0, 40, n).astype(np.int64) * 1000  # many repeated starts
    row, s, e = fn.assign(ts)
    assert (s == ts).all() and (e == GLOBAL_WINDOW_END).all()
    got_s, got_e = fn.merge(keys, s, e)
    starts_by_key = defaultdict(set)
    for k, t in zip(keys.tolist(), ts.tolist(), strict=True):
        starts_by_key[k].add(t)
    for k, t, gs, ge in zip(keys, ts, got_s, got_e, strict=True):
        later = [x for x in starts_by_key[int(k)] if x > t]
        assert gs == t
        assert ge == (min(later) if later else GLOBAL_WINDOW_END)


# --------------------------------------------------------------- calendar
def _local_date(t_ms: int, tz) -> tuple:
    d = dt.datetime.fromtimestamp(t_ms / 1000, tz=tz)
    return d.year, d.month, d.day


def _first_instant(pred, hint: int) -> int:
    """Smallest t (ms) with pred(t), given pred(hint) and not pred(hint - 40 days)."""
    lo, hi = hint - 40 * 86_400_000, hint
    assert pred(hi) and not pred(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _calendar_brute(t: int, unit: str, tz) -> tuple[int, int]:
    y, m, d = _local_date(t, tz)
    if unit == "day":

        def same(x):
            return _local_date(x, tz) == (y, m, d)

        def after(x):
            return _local_date(x, tz) > (y, m, d)
    else:

        def same(x):
            return _local_date(x, tz)[:2] == (y, m)

        def after(x):
            return _local_date(x, tz)[:2] > (y, m)

    start = _first_instant(same, t)
    probe = t
    while not after(probe):
        probe += 6 * 3_600_000
    end = _first_instant(lambda x: after(x) and x > t, probe)
    return start, end


BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def _ms(*args, tz=BERLIN) -> int:
    return int(dt.datetime(*args, tzinfo=tz).timestamp() * 1000)


def test_calendar_days_berlin_dst_lengths():
    fn = CalendarWindows("day", tz="Europe/Berlin")
    noon = [_ms(2024, 3, 30, 12), _ms(2024, 3, 31, 12), _ms(2024, 10, 27, 12), _ms(2024, 6, 1, 0)]
    _, s, e = fn.assign(np.array(noon, dtype=np.int64))
    hours = ((e - s) // 3_600_000).tolist()
    assert hours == [24, 23, 25, 24]
    # 2024-03-31 00:00 CET is 2024-03-30T23:00Z; 2024-10-27 00:00 CEST is 2024-10-26T22:00Z
    assert s[1] == int(dt.datetime(2024, 3, 30, 23, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert s[2] == int(dt.datetime(2024, 10, 26, 22, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert s[3] == noon[3]  # local midnight starts its own day


def test_calendar_month_lengths_berlin():
    fn = CalendarWindows("month", tz="Europe/Berlin")
    ts = [_ms(2024, m, 15) for m in range(1, 13)] + [_ms(2023, 2, 15)]
    _, s, e = fn.assign(np.array(ts, dtype=np.int64))
    hours = ((e - s) // 3_600_000).tolist()
    days = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 28]
    expected = [d * 24 for d in days]
    expected[2] -= 1  # March 2024 loses an hour
    expected[9] += 1  # October 2024 gains one
    assert hours == expected
    assert s.tolist() == [_ms(2024, m, 1) for m in range(1, 13)] + [_ms(2023, 2, 1)]


@pytest.mark.parametrize(
    ("unit", "tz"),
    [
        ("day", "Europe/Berlin"),
        ("month", "Europe/Berlin"),
        ("day", "America/Sao_Paulo"),
        ("day", "Australia/Lord_Howe"),
        ("day", "UTC"),
    ],
)
def test_calendar_windows_vs_brute_force(unit, tz):
    rng = np.random.default_rng(len(unit) + len(tz))
    zone = zoneinfo.ZoneInfo(tz)
    # Dense around DST changes of 2018-2024, plus random instants (some before 1970).
    ts = np.r_[
        rng.integers(_ms(2018, 1, 1), _ms(2025, 1, 1), 60),
        rng.integers(-(10**11), 0, 10),
        [_ms(2024, 3, 31, 1, 59, 59), _ms(2024, 3, 31, 3), _ms(2024, 10, 27, 2, 30)],
        [_ms(2018, 11, 4, 12, tz=zoneinfo.ZoneInfo("America/Sao_Paulo"))],
    ].astype(np.int64)
    fn = CalendarWindows(unit, tz=tz)
    _, s, e = fn.assign(ts)
    for t, gs, ge in zip(ts.tolist(), s.tolist(), e.tolist(), strict=True):
        assert (gs, ge) == _calendar_brute(t, unit, zone), dt.datetime.fromtimestamp(t / 1000, zone)


def test_calendar_windows_sao_paulo_midnight_gap():
    # 2018-11-04: clocks jump from 00:00 to 01:00 in Sao Paulo; the day starts at 01:00 local.
    sp = zoneinfo.ZoneInfo("America/Sao_Paulo")
    fn = CalendarWindows("day", tz="America/Sao_Paulo")
    _, s, e = fn.assign(np.array([_ms(2018, 11, 4, 12, tz=sp)], dtype=np.int64))
    assert s[0] == int(dt.datetime(2018, 11, 4, 3, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert e[0] - s[0] == 23 * 3_600_000


def test_calendar_years_and_every():
    fn = CalendarWindows("year", tz="Europe/Berlin")
    _, s, e = fn.assign(np.array([_ms(2024, 7, 1), _ms(2023, 12, 31, 23, 59)], dtype=np.int64))
    assert s.tolist() == [_ms(2024, 1, 1), _ms(2023, 1, 1)]
    assert e.tolist() == [_ms(2025, 1, 1), _ms(2024, 1, 1)]
    # Every 3 months: quarters (aligned on January).
    fn = CalendarWindows("month", tz="UTC", every=3)
    utc = dt.timezone.utc
    _, s, e = fn.assign(np.array([_ms(2024, 5, 20, tz=utc)], dtype=np.int64))
    assert (s[0], e[0]) == (_ms(2024, 4, 1, tz=utc), _ms(2024, 7, 1, tz=utc))


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedWindows(0),
        lambda: FixedWindows(-5),
        lambda: FixedWindows("ten minutes"),
        lambda: SlidingWindows(10, 0),
        lambda: SlidingWindows(0, 5),
        lambda: SlidingWindows(-10, 5),
        lambda: CumulativeWindows(0, 10),
        lambda: CumulativeWindows(5, -10),
        lambda: Sessions(0),
        lambda: Sessions(-1),
        lambda: CalendarWindows("week"),
        lambda: CalendarWindows("day", every=0),
    ],
)
def test_invalid_arguments_raise(make):
    with pytest.raises(ValueError):
        make()


def test_calendar_windows_unknown_time_zone_raises():
    with pytest.raises(Exception):  # noqa: B017 - zoneinfo/pytz error types differ
        CalendarWindows("day", tz="Mars/Olympus_Mons").assign(np.array([0], dtype=np.int64))
