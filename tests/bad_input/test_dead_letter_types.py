"""Dead letters keep the input's column types on the local runner: a row dropped
for a null event time comes back with its integers as integers, not floats."""

from __future__ import annotations

import pandas as pd
import pytest

import headwater as hw

ROWS = pd.DataFrame(
    {
        "k": ["a", "a", "a", "a"],
        "et": pd.to_datetime(
            ["2024-01-01 00:00:00", "2024-01-01 00:05:00", "2024-01-01 00:00:10", None]
        ),
        "arrival": pd.to_datetime(
            ["2024-01-01 00:00", "2024-01-01 00:05", "2024-01-01 00:06"] * 1 + ["2024-01-01 00:06"]
        ),
        "v": [1, 2, 3, 4],
        "w": [10, 20, 30, 40],
        "note": ["x", "y", "z", "q"],
    }
)


@pytest.mark.parametrize("streaming", [False, True], ids=["bounded", "replayed"])
def test_local_dead_letters_keep_integer_columns(streaming: bool) -> None:
    rows = ROWS if streaming else ROWS.drop(columns=["arrival"])
    options = {"arrival_time": "arrival", "watermark": "0 seconds"} if streaming else {}
    letters = (
        hw.from_pandas(rows, event_time="et", **options)
        .window(hw.FixedWindows("1 minute"))
        .group_by("k")
        .agg(s=hw.sum("v"), m=hw.max("w"))
        .dead_letters()
    )
    expected = [("late", 3, 30, "z")] if streaming else []
    expected.append(("null_event_time", 4, 40, "q"))
    got = letters[["reason", "v", "w", "note"]].itertuples(index=False, name=None)
    assert sorted(got) == sorted(expected)
    assert letters["v"].dtype == "int64" and letters["w"].dtype == "int64"
