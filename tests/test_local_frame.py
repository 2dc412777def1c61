"""from_pandas / to_pandas on the local runner."""

from __future__ import annotations

import pandas as pd

import headwater as hw


def test_key_named_key_and_late_rows_go_to_dead_letters():
    df = pd.DataFrame(
        {
            "key": ["a", "b", "a", "b"],
            "ts": [1_000, 2_000, 30_000, 3_000],  # b@3000 arrives after the watermark passed 10 s
            "v": [1, 2, 3, 4],
            "arr": [0, 0, 100, 200],
        }
    )
    result = (
        hw.from_pandas(df, "ts", arrival_time="arr", watermark=0)
        .window(hw.FixedWindows(10))
        .group_by("key")
        .agg(s=hw.sum("v"))
    )
    panes = result.to_pandas()
    assert sorted(zip(panes.key, panes.window_start, panes.s, strict=True)) == [
        ("a", 0, 1),
        ("a", 30_000, 3),
        ("b", 0, 2),
    ]
    letters = result.dead_letters()
    assert letters[["key", "event_time", "v", "reason"]].values.tolist() == [
        ["b", 3_000, 4, "late"]
    ]
    assert result.dead_letter_count() == 1


def test_bounded_frame_is_one_complete_step():
    df = pd.DataFrame({"team": ["x", "x", "y"], "ts": [5, 15_000, 7], "score": [1, 2, 3]})
    panes = (
        hw.from_pandas(df, "ts")
        .window(hw.FixedWindows(10), trigger=hw.AfterCount(5))
        .group_by("team")
        .agg(total=hw.sum("score"))
        .to_pandas()
    )
    assert set(panes.timing) == {"ON_TIME"} and panes.is_last.all()
    assert sorted(zip(panes.team, panes.total, strict=True)) == [("x", 1), ("x", 2), ("y", 3)]
