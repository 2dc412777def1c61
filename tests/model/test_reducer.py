"""Triggers and reducer steps on hand-built timelines; expected panes derived by hand.

Times are written in seconds; values are the elements' timestamps (in seconds),
as in the transcripts. ``P(window, values, timing, index, final)`` is one pane.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from headwater.model.combiners import Count, Min, Sum
from headwater.model.reducer import Emission, Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import GLOBAL_WINDOW_END, MAX_TIMESTAMP, MIN_TIMESTAMP
from headwater.model.triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Default,
    Never,
    OrFinally,
    Repeatedly,
)
from headwater.model.windows import FixedWindows, GlobalWindows, Sessions

G = "global"


class Run:
    """A reducer driven in seconds, recording every step's emission."""

    def __init__(self, window_fn, trigger, mode="discarding", lateness=0, tc="OUTPUT_AT_EOW"):
        self.r = Reducer(WindowingStrategy.of(window_fn, trigger, mode, lateness, tc), None)

    def input(self, *ts, key="k") -> Emission:
        return self.r.add_bundle([key] * len(ts), [round(t * 1000) for t in ts], list(ts))

    def watermark(self, t) -> Emission:
        return self.r.advance_watermark(MAX_TIMESTAMP if t == math.inf else round(t * 1000))

    def clock(self, t) -> Emission:
        return self.r.advance_clock(round(t * 1000))


def P(window, values, timing, index, final=False, key="k", retraction=False):
    return (key, window, sorted(values), timing, index, final, retraction)


def panes(em: Emission) -> list[tuple]:
    """Panes in emission order, windows in seconds."""
    out = []
    for p in em.panes.to_dict("records") if len(em.panes) else []:
        if p["window_end"] == GLOBAL_WINDOW_END:
            window = G
        else:
            window = (p["window_start"] / 1000, p["window_end"] / 1000)
        out.append(
            (
                p["key"],
                window,
                sorted(p["values"]),
                p["timing"],
                int(p["pane_index"]),
                bool(p["is_last"]),
                bool(p["is_retraction"]),
            )
        )
    return out


def same(em: Emission, *expected) -> None:
    assert sorted(panes(em), key=repr) == sorted(expected, key=repr)


# ===================================================== processing time
def test_aligned_processing_time_fires_at_boundaries_strictly_after_arrival():
    run = Run(GlobalWindows(), Repeatedly(AfterProcessingTime(period=10, offset=3)))
    same(run.clock(13))
    same(run.input(1))  # arrives at 13, exactly on a boundary: fires at 23, not 13
    assert run.r.next_timer() == 23_000
    same(run.clock(22.999))
    same(run.input(2))  # same pane, no new timer
    assert run.r.next_timer() == 23_000
    same(run.clock(23), P(G, [1, 2], "EARLY", 0))
    assert run.r.next_timer() is None
    same(run.input(3))  # arrives at 23: next boundary is 33
    same(run.input(4, key="x"))
    same(run.clock(31))
    same(run.input(5, key="y"))  # arrives at 31: also 33, all keys fire together
    assert run.r.next_timer() == 33_000
    same(run.clock(50), P(G, [3], "EARLY", 1), P(G, [4], "EARLY", 0, key="x"),
         P(G, [5], "EARLY", 0, key="y"))  # fmt: skip


def test_aligned_offset_larger_than_period_and_delay():
    run = Run(GlobalWindows(), Repeatedly(AfterProcessingTime(period=10, offset=27)))
    run.clock(14)
    run.input(1)
    assert run.r.next_timer() == 17_000  # boundaries ..., 7, 17, 27, ...
    run = Run(GlobalWindows(), Repeatedly(AfterProcessingTime(5)))
    run.clock(14)
    run.input(1)
    run.clock(16)
    run.input(2)
    assert run.r.next_timer() == 19_000  # delay after the pane's FIRST element
    same(run.clock(19), P(G, [1, 2], "EARLY", 0))
    with pytest.raises(ValueError):
        AfterProcessingTime(5, period=10)
    with pytest.raises(ValueError):
        AfterProcessingTime(-1)


def test_timers_fire_earliest_first_each_at_its_own_time():
    run = Run(FixedWindows(100), Repeatedly(AfterProcessingTime(5)), "accumulating")
    run.input(1, key="a")  # timer 5
    run.clock(2)
    run.input(2, key="b")  # timer 7
    run.clock(3)
    run.input(3, key="a")  # same pane of a: still 5
    em = run.clock(20)
    assert panes(em) == [P((0, 100), [1, 3], "EARLY", 0, key="a"),
                         P((0, 100), [2], "EARLY", 0, key="b")]  # fmt: skip
    # A timer that comes due during the clock step, set by a firing at its own time:
    run = Run(FixedWindows(100), Repeatedly(AfterProcessingTime(5)))
    run.input(1)
    same(run.clock(5), P((0, 100), [1], "EARLY", 0))
    same(run.clock(100))  # no element since: no timer


def test_processing_time_then_input_in_order():
    """Rule 7: an input step is added after whatever the earlier clock step fired."""
    run = Run(FixedWindows(100), Repeatedly(AfterProcessingTime(5)), "discarding")
    run.input(1)
    same(run.clock(10), P((0, 100), [1], "EARLY", 0))
    same(run.input(2))  # arrives at 10: a new pane, due at 15
    assert run.r.next_timer() == 15_000


# ======================================================= composites
def test_after_each_counts():
    run = Run(FixedWindows(10), AfterEach(AfterCount(2), AfterCount(3)), lateness=100)
    same(run.input(1))
    same(run.input(2), P((0, 10), [1, 2], "EARLY", 0))
    same(run.input(3))
    same(run.input(4))
    same(run.input(5), P((0, 10), [3, 4, 5], "EARLY", 1, final=True))
    em = run.input(6)
    same(em)
    assert em.dropped[["timestamp", "reason", "value"]].values.tolist() == [[6000, "closed", 6]]


def test_after_each_count_then_watermark():
    run = Run(FixedWindows(10), AfterEach(AfterCount(2), AfterWatermark()), lateness=100)
    same(run.input(1, 2, 3), P((0, 10), [1, 2, 3], "EARLY", 0))
    same(run.input(4))
    same(run.watermark(10), P((0, 10), [4], "ON_TIME", 1, final=True))
    assert run.input(5).dropped["reason"].tolist() == ["closed"]


def test_after_each_count_then_watermark_empty_on_time_pane():
    run = Run(FixedWindows(10), AfterEach(AfterCount(2), AfterWatermark()))
    same(run.input(1, 2), P((0, 10), [1, 2], "EARLY", 0))
    same(run.watermark(10), P((0, 10), [], "ON_TIME", 1, final=True))


def test_after_all_count_and_processing_time():
    run = Run(FixedWindows(100), AfterAll(AfterCount(2), AfterProcessingTime(5)))
    same(run.input(1))
    same(run.clock(5))  # the delay passed, but only one element
    same(run.clock(6))
    same(run.input(2), P((0, 100), [1, 2], "EARLY", 0, final=True))  # timer stays fired
    assert run.input(3).dropped["reason"].tolist() == ["closed"]


def test_repeatedly_after_all_resets_both():
    run = Run(FixedWindows(100), Repeatedly(AfterAll(AfterCount(2), AfterProcessingTime(5))))
    same(run.input(1, 2))
    same(run.clock(5), P((0, 100), [1, 2], "EARLY", 0))
    same(run.input(3))  # new timer at 10, count 1
    same(run.clock(10))
    same(run.input(4), P((0, 100), [3, 4], "EARLY", 1))


def test_after_all_of_two_processing_times_fires_at_the_later_one():
    run = Run(FixedWindows(100), AfterAll(AfterProcessingTime(5), AfterProcessingTime(10)))
    same(run.input(1))
    same(run.clock(5))
    assert run.r.next_timer() == 10_000
    same(run.clock(20), P((0, 100), [1], "EARLY", 0, final=True))


def test_repeatedly_after_any_count_or_processing_time():
    run = Run(FixedWindows(100), Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(5))))
    same(run.input(1, 2))
    same(run.clock(5), P((0, 100), [1, 2], "EARLY", 0))
    run.clock(6)
    same(run.input(3, 4, 5), P((0, 100), [3, 4, 5], "EARLY", 1))
    assert run.r.next_timer() is None  # the count fired: the whole AfterAny reset
    same(run.clock(30))
    same(run.input(6))
    same(run.clock(35), P((0, 100), [6], "EARLY", 2))
    same(run.watermark(100))  # Repeatedly(AfterAny(...)) has no ON_TIME pane...
    same(run.watermark(101))


def test_or_finally_count_until_count():
    run = Run(GlobalWindows(), OrFinally(Repeatedly(AfterCount(2)), AfterCount(5)))
    out = [panes(run.input(t)) for t in (1, 2, 3, 4, 5)]
    assert out == [
        [],
        [P(G, [1, 2], "EARLY", 0)],
        [],
        [P(G, [3, 4], "EARLY", 1)],
        [P(G, [5], "EARLY", 2, final=True)],
    ]
    assert run.input(6).dropped["reason"].tolist() == ["closed"]
    same(run.watermark(math.inf))


def test_or_finally_count_until_watermark():
    run = Run(FixedWindows(10), OrFinally(Repeatedly(AfterCount(2)), AfterWatermark()),
              "accumulating", lateness=30)  # fmt: skip
    same(run.input(1))
    same(run.input(2), P((0, 10), [1, 2], "EARLY", 0))
    same(run.input(3))
    same(run.watermark(10), P((0, 10), [1, 2, 3], "ON_TIME", 1, final=True))
    em = run.input(4)
    same(em)
    assert em.dropped["reason"].tolist() == ["closed"]


def test_watermark_with_early_and_late_firings():
    run = Run(FixedWindows(10), AfterWatermark(early=AfterCount(1), late=AfterCount(2)),
              "discarding", lateness=20)  # fmt: skip
    same(run.input(1), P((0, 10), [1], "EARLY", 0))
    same(run.input(2, 3), P((0, 10), [2, 3], "EARLY", 1))
    same(run.watermark(12), P((0, 10), [], "ON_TIME", 2))  # rule 2: empty ON_TIME pane
    same(run.input(4))
    same(run.input(5), P((0, 10), [4, 5], "LATE", 3))
    same(run.input(6))
    same(run.watermark(30), P((0, 10), [6], "LATE", 4, final=True))  # rule 4: GC flush
    assert run.input(7).dropped["reason"].tolist() == ["late"]


def test_watermark_trigger_empty_on_time_pane_carries_the_empty_value():
    r = Reducer(
        WindowingStrategy.of(FixedWindows(10), AfterWatermark(early=AfterCount(1)), "discarding"),
        {"total": (Sum(), "value"), "n": (Count(), None), "lo": (Min(), "value")},
    )
    r.add_bundle(["k"], [1000], [5])
    out = r.advance_watermark(10_000).panes
    assert out["timing"].tolist() == ["ON_TIME"]
    # SQL semantics: the sum of no value is NULL (NaN), the count 0.
    assert np.isnan(float(out["total"].iloc[0])) and out["n"].tolist() == [0]
    assert np.isnan(float(out["lo"].iloc[0]))
    assert out["is_last"].tolist() == [True]


def test_never_emits_at_garbage_collection_only():
    run = Run(FixedWindows(10), Never(), "accumulating", lateness=5)
    same(run.input(1, 2))
    same(run.watermark(14))
    same(run.input(3))
    same(run.watermark(15), P((0, 10), [1, 2, 3], "ON_TIME", 0, final=True))


def test_default_trigger_global_window_fires_at_end_of_input():
    run = Run(GlobalWindows(), Default(), "accumulating", lateness=0)
    same(run.input(-5, 10**9))
    same(run.watermark(10**12))
    same(run.watermark(math.inf), P(G, [-5, 10**9], "ON_TIME", 0, final=True))


# ============================================================ lateness
def test_rule_3_boundary_at_or_before_the_watermark():
    run = Run(FixedWindows(10), Default(), "accumulating", lateness=5)
    run.watermark(14.999)
    assert len(run.input(9).dropped) == 0  # end 10 + 5 = 15 > 14.999: kept
    run.watermark(15)
    em = run.input(9.5)  # end + lateness == watermark: dropped
    assert em.dropped[["timestamp", "window_start", "window_end", "reason"]].values.tolist() == [
        [9500, 0, 10_000, "late"]
    ]
    assert run.r.dropped_count == 1


def test_default_trigger_late_panes_and_finality():
    run = Run(FixedWindows(10), Default(), "accumulating", lateness=10)
    same(run.input(1))
    same(run.watermark(10), P((0, 10), [1], "ON_TIME", 0))
    same(run.input(2, 3), P((0, 10), [1, 2, 3], "LATE", 1))
    same(run.input(4), P((0, 10), [1, 2, 3, 4], "LATE", 2))
    same(run.watermark(20))  # GC: nothing pending, no pane
    assert run.input(5).dropped["reason"].tolist() == ["late"]


def test_late_element_arriving_after_watermark_is_late_first_pane():
    """Rule 1: a window whose first data arrives late starts with a LATE pane."""
    run = Run(FixedWindows(10), Default(), "accumulating", lateness=100)
    run.watermark(50)
    em = run.input(5)
    same(em, P((0, 10), [5], "LATE", 0))
    assert em.panes["nonspeculative_index"].tolist() == [0]
    assert em.panes["is_first"].tolist() == [True]
    same(run.input(6), P((0, 10), [5, 6], "LATE", 1))


def test_late_created_window_first_pane_is_late_under_every_trigger():
    for trigger in (Repeatedly(AfterCount(1)), AfterWatermark(late=AfterCount(1))):
        run = Run(FixedWindows(10), trigger, "discarding", lateness=100)
        run.watermark(50)
        same(run.input(5), P((0, 10), [5], "LATE", 0))
    # Processing time: the pane fires after the end with only late data.
    run = Run(FixedWindows(10), Repeatedly(AfterProcessingTime(5)), "discarding", lateness=100)
    run.watermark(50)
    same(run.input(5))
    same(run.clock(5), P((0, 10), [5], "LATE", 0))


def test_after_count_completed_by_late_element_is_on_time():
    """Rule 1: the pane emits on-time data that no pane had emitted yet."""
    run = Run(FixedWindows(10), AfterCount(2), "discarding", lateness=100)
    same(run.input(1))
    same(run.watermark(20))
    em = run.input(2)
    same(em, P((0, 10), [1, 2], "ON_TIME", 0, final=True))
    assert em.panes["nonspeculative_index"].tolist() == [0]


def test_after_count_after_an_early_pane_completed_late_is_on_time():
    run = Run(FixedWindows(10), Repeatedly(AfterCount(2)), "discarding", lateness=100)
    same(run.input(1, 2), P((0, 10), [1, 2], "EARLY", 0))
    same(run.input(3))  # on time, not emitted yet
    same(run.watermark(20))
    same(run.input(4), P((0, 10), [3, 4], "ON_TIME", 1))
    same(run.input(5, 6), P((0, 10), [5, 6], "LATE", 2))


def test_after_count_with_only_late_data_after_an_early_pane_is_late():
    run = Run(FixedWindows(10), Repeatedly(AfterCount(2)), "accumulating", lateness=100)
    same(run.input(1, 2), P((0, 10), [1, 2], "EARLY", 0))
    same(run.watermark(20))
    em = run.input(3, 4)
    same(em, P((0, 10), [1, 2, 3, 4], "LATE", 1))
    assert em.panes["nonspeculative_index"].tolist() == [0]


def test_gc_flush_of_on_time_data_is_on_time():
    run = Run(FixedWindows(10), Never(), "discarding", lateness=5)
    same(run.input(1))
    same(run.watermark(12))
    same(run.input(2))  # late, but the window also holds unemitted on-time data
    same(run.watermark(15), P((0, 10), [1, 2], "ON_TIME", 0, final=True))


def test_gc_flush_of_only_late_data_is_late():
    run = Run(FixedWindows(10), Never(), "discarding", lateness=5)
    same(run.watermark(12))
    same(run.input(2))
    em = run.watermark(15)
    same(em, P((0, 10), [2], "LATE", 0, final=True))
    assert em.panes["nonspeculative_index"].tolist() == [0]


def test_micro_batch_past_the_end_fires_one_on_time_pane():
    """Rows added at a watermark before the end, then the watermark passes it in the
    same step: the end-of-window firing, ON_TIME, and no EARLY pane."""
    strategy = WindowingStrategy.of(FixedWindows(10), AfterWatermark(early=AfterCount(1)))
    r = Reducer(strategy, None)
    em = r.step(["k", "k"], [1000, 2000], [1, 2], watermark=30_000)
    same(em, P((0, 10), [1, 2], "ON_TIME", 0, final=True))
    assert em.panes["nonspeculative_index"].tolist() == [0]


# ====================================================== timestamps
@pytest.mark.parametrize(
    ("tc", "expected"),
    [("OUTPUT_AT_EOW", 9999), ("OUTPUT_AT_EARLIEST", 2000), ("OUTPUT_AT_LATEST", 7000)],
)
def test_timestamp_combiners(tc, expected):
    run = Run(FixedWindows(10), Default(), "accumulating", tc=tc)
    run.input(5, 2)
    run.input(7)
    out = run.watermark(10).panes
    assert out["timestamp"].tolist() == [expected]


# ============================================================= sessions
def test_session_merges_restart_or_continue_pane_history():
    run = Run(Sessions(10), Repeatedly(AfterCount(1)), "retracting")
    same(run.input(0), P((0, 10), [0], "EARLY", 0))
    # [5, 15) merges with [0, 10) into the NEW window [0, 15): a new history (rule 5),
    # and the merged-away window's pane is retracted in the same firing (rule 6).
    same(
        run.input(5),
        P((0, 10), [0], "EARLY", 0, retraction=True),
        P((0, 15), [0, 5], "EARLY", 0),
    )
    # [3, 13) merges into the EXISTING [0, 15): its history continues.
    same(
        run.input(3),
        P((0, 15), [0, 5], "EARLY", 0, retraction=True),
        P((0, 15), [0, 3, 5], "EARLY", 1),
    )
    same(run.input(30, key="other"), P((30, 40), [30], "EARLY", 0, key="other"))


def test_late_element_bridges_fired_sessions():
    run = Run(Sessions(10), Default(), "retracting", lateness=100)
    run.input(0)
    run.input(12)
    same(
        run.watermark(50),
        P((0, 10), [0], "ON_TIME", 0),
        P((12, 22), [12], "ON_TIME", 0),
    )
    # [5, 15) bridges both: a new window [0, 22) whose first pane is LATE (rule 1):
    # its only unemitted data (5) arrived after the watermark passed the end.
    same(
        run.input(5),
        P((0, 10), [0], "ON_TIME", 0, retraction=True),
        P((12, 22), [12], "ON_TIME", 0, retraction=True),
        P((0, 22), [0, 5, 12], "LATE", 0),
    )
    # A retraction repeats the timing of the pane it withdraws.
    same(run.input(20), P((0, 22), [0, 5, 12], "LATE", 0, retraction=True),
         P((0, 30), [0, 5, 12, 20], "LATE", 0))  # fmt: skip
    same(run.watermark(130))


def test_late_element_bridging_a_session_with_unemitted_on_time_data():
    """The bridged session carries on-time data no pane emitted: ON_TIME."""
    run = Run(Sessions(10), AfterCount(3), "discarding", lateness=100)
    run.input(0)  # [0, 10): one on-time element, not emitted
    run.input(12, 13)  # [12, 23): two
    same(run.watermark(50))
    same(run.input(5), P((0, 23), [0, 5, 12, 13], "ON_TIME", 0, final=True))


def test_session_merge_counts_add_and_earliest_timer_wins():
    run = Run(Sessions(10), Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(10))))
    run.input(0)  # [0, 10), timer 10
    run.clock(4)
    run.input(12)  # [12, 22), timer 14
    assert run.r.next_timer() == 10_000
    # [5, 15) bridges both at processing time 4: counts 1 + 1 + 1 = 3 fire at once.
    same(run.input(5), P((0, 22), [0, 5, 12], "EARLY", 0))
    assert run.r.next_timer() is None
    run.input(1)  # into the existing [0, 22): timer 14
    run.clock(6)
    run.input(31)  # a separate session [31, 41), timer 16
    run.clock(7)
    # [21.5, 31.5) bridges [0, 22) and [31, 41): a new window, counts 1 + 1 + 1.
    same(run.input(21.5), P((0, 41), [1, 21.5, 31], "EARLY", 0))
    run = Run(Sessions(10), Repeatedly(AfterAny(AfterCount(5), AfterProcessingTime(10))))
    run.input(0)  # timer 10
    run.clock(4)
    run.input(12)  # timer 14
    run.input(5)  # merged: the earliest timer (10) wins
    assert run.r.next_timer() == 10_000
    same(run.clock(10), P((0, 22), [0, 5, 12], "EARLY", 0))


def test_closed_session_bridged_to_open_session_loses_nothing():
    for mode in ("discarding", "accumulating", "retracting"):
        run = Run(Sessions(5), AfterCount(2), mode)
        same(run.input(1, 2), P((1, 7), [1, 2], "EARLY", 0, final=True))
        same(run.input(10))  # [10, 15): one element, pending
        em = run.input(6)  # [6, 11) bridges the closed [1, 7) and the open [10, 15)
        end = run.watermark(math.inf)
        panes = pd.concat([em.panes, end.panes])
        emitted = [v for vs in panes[~panes["is_retraction"].astype(bool)]["values"] for v in vs]
        # Elements 6 and 10 must come out (in a pane) or be counted as dropped.
        assert emitted.count(10) + emitted.count(6) + run.r.dropped_count >= 2, mode


# ============================================================ API odds
def test_reducer_watermark_and_clock_never_go_back():
    run = Run(FixedWindows(10), Default())
    run.watermark(20)
    same(run.watermark(5))
    assert run.r.watermark == 20_000
    run.clock(10)
    run.clock(3)
    assert run.r.now == 10_000
    assert Reducer(WindowingStrategy()).watermark == MIN_TIMESTAMP


def test_values_frame_columns_and_missing_column():
    r = Reducer(WindowingStrategy.of(FixedWindows(10)), {"t": (Sum(), "amount")})
    with pytest.raises(KeyError, match="amount"):
        r.add_bundle(["k"], [1000], pd.DataFrame({"other": [1]}))


def test_queued_session_retraction_survives_snapshot_and_second_merge():
    strategy = WindowingStrategy.of(Sessions(10), Repeatedly(AfterCount(2)), "retracting")
    run = Run(Sessions(10), Repeatedly(AfterCount(2)), "retracting")
    same(run.input(0, 1), P((0, 11), [0, 1], "EARLY", 0))
    run.input(50, key="other")  # another key, so the snapshot's key codes get remapped
    same(run.input(5))  # [0, 15): count 1, the retraction of [0, 11) waits for it to fire
    run.r = Reducer.restore(strategy, None, run.r.snapshot())
    same(
        run.input(14),  # [0, 24), a new window again: the queued retraction moves along
        P((0, 11), [0, 1], "EARLY", 0, retraction=True),
        P((0, 24), [0, 1, 5, 14], "EARLY", 0),
    )
    same(run.input(51, key="other"), P((50, 61), [50, 51], "EARLY", 0, key="other"))


def test_count_without_input_column_next_to_dropped_elements():
    r = Reducer(WindowingStrategy.of(FixedWindows(10)), {"n": (Count(), None), "s": (Sum(), "x")})
    r.advance_watermark(10_000)
    em = r.add_bundle(["a", "b"], [1_000, 15_000], pd.DataFrame({"x": [1, 2]}))
    assert len(em.dropped) == 1
    assert r.advance_watermark(10**9).panes[["key", "n", "s"]].values.tolist() == [["b", 1, 2]]


def test_forget_drops_the_keys_windows_and_their_dictionary_entries():
    """A state time-to-live: the forgotten keys' accumulated elements are gone (a
    later element starts afresh), the others' are kept, and the snapshot holds
    only the live keys."""
    run = Run(GlobalWindows(), Repeatedly(AfterCount(1)), "accumulating")
    run.input(1, 2, key="a")
    run.input(3, key="b")
    run.r.forget(np.array(["a", "unseen"], dtype=object))
    assert len(run.r) == 1
    same(run.input(4, key="a"), P(G, [4], "EARLY", 0, key="a"))
    same(run.input(5, key="b"), P(G, [3, 5], "EARLY", 1, key="b"))
    restored = Reducer.restore(run.r.strategy, None, run.r.snapshot())
    assert len(restored) == 2
