"""The stream generator: the profiles' statistics, reproducibility, and the file reader."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headwater.hybrid.generator import PROFILES, generate, profile, read_stream, stream_stats
from headwater.model.slack import delays


@pytest.mark.parametrize("name", ["game1", "game2"])
def test_profile_statistics_at_full_size(name):
    """Tolerances: late fraction within 0.5 points, mean delay within 3%, maximum delay
    within 5 ms of the paper's (DEBS 2013 games), for the default seed and another."""
    p = PROFILES[name]
    for seed in (0, 11):
        stats = stream_stats(generate(p, seed=seed))
        assert stats.tuples == p.events
        assert abs(stats.late_fraction - p.target_late) < 0.005
        assert abs(stats.mean_delay_ms / p.target_mean_delay_ms - 1) < 0.03
        assert abs(stats.max_delay_ms - p.max_delay_ms) <= 5


def test_generation_is_reproducible():
    a = generate(PROFILES["game1"], seed=3, events=20_000)
    b = generate(PROFILES["game1"], seed=3, events=20_000)
    c = generate(PROFILES["game1"], seed=4, events=20_000)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)
    assert a["arrival"].is_monotonic_increasing
    assert a["sensor"].nunique() == PROFILES["game1"].sensors


def test_delay_definition():
    # in arrival order: 10, 7 (3 behind 10), 12, 12 (a tie is not late), 4 (8 behind 12)
    assert list(delays(np.array([10, 7, 12, 12, 4]))) == [0, 3, 0, 0, 8]
    stats = stream_stats(pd.DataFrame({"ts": [10, 7, 12, 12, 4]}))
    assert (stats.late_fraction, stats.mean_delay_ms, stats.max_delay_ms) == (0.4, 2.2, 8)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_read_stream_roundtrip(tmp_path, suffix):
    stream = generate(PROFILES["game2"], seed=1, events=2_000)
    renamed = stream.rename(columns={"ts": "t", "arrival": "seen"})
    path = tmp_path / f"s{suffix}"
    renamed.to_csv(path, index=False) if suffix == ".csv" else renamed.to_parquet(path)
    pd.testing.assert_frame_equal(read_stream(path, event_time="t", arrival="seen"), stream)


def test_read_stream_with_arrival_order(tmp_path):
    frame = pd.DataFrame({"pos": [2, 0, 1], "ts": [5, 10, 3], "sensor": "x", "speed": 1})
    frame.to_csv(tmp_path / "s.csv", index=False)
    back = read_stream(tmp_path / "s.csv", arrival="pos", arrival_is_order=True)
    assert list(back["ts"]) == [10, 3, 5]
    assert list(back["arrival"]) == [10, 10, 10]  # the clock: largest event time so far


def test_read_stream_names_missing_columns(tmp_path):
    pd.DataFrame({"ts": [1]}).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(ValueError, match=r"no column\(s\) \['arrival', 'sensor', 'speed'\]"):
        read_stream(tmp_path / "s.csv")
    with pytest.raises(ValueError, match="choose one of"):
        profile("game3")
