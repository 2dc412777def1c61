"""time.to_millis: every accepted spelling of a duration, and the rejections."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from headwater.model.time import (
    GLOBAL_WINDOW_END,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    seconds_to_millis,
    to_millis,
)


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        (0, 0),
        (1, 1000),
        (2.5, 2500),
        (-3, -3000),
        (0.001, 1),
        (np.int64(7), 7000),
        (np.float64(0.25), 250),
        (None, 0),
    ],
)
def test_numbers_are_seconds(given, ms):
    assert to_millis(given) == ms
    assert isinstance(to_millis(given), int)


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        (dt.timedelta(minutes=2), 120_000),
        (dt.timedelta(milliseconds=500), 500),
        (dt.timedelta(days=1, seconds=1), 86_401_000),
        (dt.timedelta(seconds=-5), -5000),
        (dt.timedelta(microseconds=1500), 2),  # rounded to the nearest millisecond
    ],
)
def test_timedelta(given, ms):
    assert to_millis(given) == ms


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        ("2 minutes", 120_000),
        ("1 minute", 60_000),
        ("500 ms", 500),
        ("500ms", 500),
        ("3 seconds", 3000),
        ("1.5 s", 1500),
        ("  10 sec  ", 10_000),
        ("2 hours", 7_200_000),
        ("1 h", 3_600_000),
        ("1 day", 86_400_000),
        ("2 weeks", 14 * 86_400_000),
        ("5 MINUTES", 300_000),
        ("250 milliseconds", 250),
    ],
)
def test_duration_strings(given, ms):
    assert to_millis(given) == ms


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        ("INTERVAL '2' MINUTE", 120_000),
        ("INTERVAL '10' SECOND", 10_000),
        ("INTERVAL '1' HOUR", 3_600_000),
        ("INTERVAL '3' DAY", 3 * 86_400_000),
        ("interval '5' seconds", 5000),
        ("INTERVAL '1.5' SECOND", 1500),
    ],
)
def test_sql_intervals(given, ms):
    assert to_millis(given) == ms


@pytest.mark.parametrize(
    "bad",
    [
        "two minutes",
        "2 fortnights",
        "",
        "minutes",
        "INTERVAL 2 MINUTE",
        "INTERVAL '2' EON",
        "2 minutes 3 seconds",
        "1e3 ms",
    ],
)
def test_bad_strings_raise_value_error_naming_the_input(bad):
    with pytest.raises(ValueError) as info:
        to_millis(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [True, [1], object()])
def test_non_durations_raise(bad):
    with pytest.raises((TypeError, ValueError)):
        to_millis(bad)


def test_infinities_and_sentinels():
    assert to_millis(float("inf")) == MAX_TIMESTAMP
    assert to_millis(float("-inf")) == MIN_TIMESTAMP
    assert seconds_to_millis(float("inf")) == MAX_TIMESTAMP
    assert seconds_to_millis(12.3456) == 12_346
    assert MIN_TIMESTAMP < 0 < GLOBAL_WINDOW_END < MAX_TIMESTAMP
    # Beam ends the global window one day before the end of time.
    assert MAX_TIMESTAMP - GLOBAL_WINDOW_END == 86_400_000
