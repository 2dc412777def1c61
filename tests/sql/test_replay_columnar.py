"""A replay file read whole by Arrow's JSON reader gives the table the line
reader gives (rows, their types and ptimes, watermarks, rejected lines), and a
file Arrow cannot take as is falls back to the line reader, which names the line
at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write_replay
from headwater.sql.execute.replay import ReplayError, read_columns, read_replay

ROOT = Path(__file__).resolve().parents[2]


def lines(*items: dict | str) -> str:
    return "".join((i if isinstance(i, str) else json.dumps(i)) + "\n" for i in items)


#: name -> (file text, declared types): each read both ways must agree.
CASES = {  # the first four Arrow reads whole, the rest fall back
    "iso ptimes, offsets and watermarks": (
        lines(
            {"ptime": "2024-01-01T11:00:00", "row": {"t": "2024-01-01T10:00:00.5", "k": "a"}},
            {"ptime": "2024-01-01T12:00:01+01:00", "row": {"t": "2024-01-01T10:00:01", "k": None}},
            "",
            {"ptime": "2024-01-01 11:00:02Z", "watermark": "2024-01-01 09:59:59"},
            {"ptime": "2024-01-01T11:00:03", "row": {"t": "2024-01-01T10:00:02", "k": "b"}},
        ),
        {},
    ),
    "numeric ptimes, every flat type, a missing key": (
        lines(
            {"ptime": 1000, "row": {"t": 5, "i": 1, "x": 1.5, "b": True, "s": "q", "n": None}},
            {"ptime": 1000.0, "row": {"t": 6, "i": None, "x": 2, "b": None, "s": None}},
            {"ptime": 2000, "watermark": 4},
            {"ptime": 3000, "row": {"t": 7, "i": 2**62, "x": -0.5, "b": False, "s": "", "n": "z"}},
        ),
        {},
    ),
    "times Arrow would type, and their text": (
        lines(
            {
                "ptime": "2024-01-01 11:00:00",
                "row": {"t": "2024-01-01 10:00:00", "u": "2024-01-02 00:00:00"},
            },
            {"ptime": "2024-01-01 11:00:01", "watermark": "2024-01-01 10:00:00"},
        ),
        {},
    ),
    "declared types": (
        lines(
            {"ptime": 1, "row": {"t": "2024-01-01T10:00:00", "v": 3, "d": "1.25"}},
            {"ptime": 2, "row": {"t": "2024-01-01T10:00:01", "v": 4, "d": "2.5"}},
        ),
        {"v": "DOUBLE", "d": "DECIMAL(10, 2)"},
    ),
    # the line reader's cases: each falls back
    "a value not of its declared type (a rejected line)": (
        lines({"ptime": 1, "row": {"t": 1, "v": 3}}, {"ptime": 2, "row": {"t": 2, "v": "x"}}),
        {"v": "BIGINT"},
    ),
    "a column of two JSON types": (
        lines({"ptime": 1, "row": {"t": 1, "v": 3}}, {"ptime": 2, "row": {"t": 2, "v": "x"}}),
        {},
    ),
    "nested values": (
        lines({"ptime": 1, "row": {"t": 1, "v": [1, 2], "m": {"a": 1}}}),
        {},
    ),
    "an integer beyond 64 bits": (lines({"ptime": 1, "row": {"t": 1, "v": 2**70}}), {}),
    "only watermarks": (lines({"ptime": 1, "watermark": 1}), {"t": "BIGINT"}),
}

COLUMNAR = list(CASES)[:4]


def nulls_as_none(frame: pd.DataFrame) -> pd.DataFrame:
    """A missing key is NaN to the line reader and None to Arrow: both NULL."""
    text = frame.select_dtypes(object).columns
    return frame.assign(**{c: frame[c].where(frame[c].notna(), None) for c in text})


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(nulls_as_none(a.frame), nulls_as_none(b.frame))
    pd.testing.assert_frame_equal(a.watermarks, b.watermarks)
    assert (a.rejects is None or len(a.rejects) == 0) == (b.rejects is None or len(b.rejects) == 0)
    if b.rejects is not None and len(b.rejects):
        pd.testing.assert_frame_equal(a.rejects, b.rejects)
    assert type(a.watermark) is type(b.watermark)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_columnar_read_equals_the_line_reader(tmp_path, name: str) -> None:
    text, types = CASES[name]
    path = tmp_path / "r.jsonl"
    path.write_text(text)
    assert (read_columns(path, "t", types) is not None) == (name in COLUMNAR)
    assert_same(
        read_replay(path, "R", "t", types),
        read_replay(path, "R", "t", types, vectorized=False),
    )


def test_the_rejected_line_is_named_after_the_fall_back(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(CASES["a value not of its declared type (a rejected line)"][0])
    table = read_replay(path, "R", "t", {"v": "BIGINT"})
    assert len(table.rejects) == 1 and '"x"' in table.rejects.iloc[0].to_dict().__repr__()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (lines({"ptime": 1, "row": {"t": 1}}) + "{not json\n", "line 2: not JSON"),
        (lines({"ptime": 2, "row": {"t": 1}}, {"ptime": 1, "row": {"t": 2}}), "line 2: ptime goes"),
        (lines({"ptime": 1, "row": {"t": 1}, "watermark": 1}), "line 1: a line has either"),
        (lines({"ptime": True, "row": {"t": 1}}), "line 1: True is not a time"),
        (lines({"ptime": 1, "row": {"u": 1}}), "no column 't' in its rows"),
    ],
)
def test_a_fault_is_named_as_the_line_reader_names_it(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(text)
    with pytest.raises(ReplayError, match=message):
        read_replay(path, "R", "t")


def test_nexmark_and_the_papers_replays_read_the_same_both_ways(tmp_path) -> None:
    events = generate(NexmarkConfig(events=3000, seed=3))
    paths = write_replay(events, tmp_path, watermark_every_ms=500, step_ms=1000)
    paths.append(str(ROOT / "tests" / "sql" / "data" / "paper" / "bids.jsonl"))
    for path in paths:
        event_time = "bidtime" if path.endswith("paper/bids.jsonl") else "dateTime"
        fast = read_replay(path, "T", event_time)
        assert len(fast.frame) > 0 and read_columns(path, event_time, {}) is not None
        assert_same(fast, read_replay(path, "T", event_time, vectorized=False))
