"""The replay source: timeline files, and one step per micro-batch in Spark."""

from __future__ import annotations

import json

import pytest

from headwater.io.replay import Timeline, read_replay, write_timeline
from headwater.model.time import MAX_TIMESTAMP

STEPS = [
    {"proc_ms": 0, "rows": [["a", 1000, 3.0], {"key": "b", "ts": 1500, "value": 1.0}]},
    {"watermark_ms": 2000},
    {"proc_ms": 5000},
    {"proc_ms": 6000, "watermark_ms": "inf", "rows": [["a", 400, 2.0]]},
]


def test_write_and_index(tmp_path):
    path = tmp_path / "t.jsonl"
    write_timeline(path, STEPS)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["headwater_replay"] == 1
    tl = Timeline(str(path))
    # (offset, length, proc_ms, effective watermark, fires timers): proc and watermark
    # carry forward; a step fires processing-time timers when it moves processing
    # time, or when it is a clock step (neither rows nor a watermark)
    assert [s[2:] for s in tl.steps] == [
        (0, None, False),
        (0, 2000, False),
        (5000, 2000, True),
        (6000, MAX_TIMESTAMP, True),
    ]
    assert tl.schema_ddl().startswith("kind STRING, key string, ts BIGINT, `value` double")


def test_headerless_file_and_columns(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"rows": [["x", 5, 1.5]]}\n\n{"proc_ms": 10}\n')
    tl = Timeline(str(path))
    assert len(tl.steps) == 2 and tl.columns == {"value": "double"}


@pytest.mark.parametrize(
    "steps, message",
    [
        ([{"proc_ms": 5}, {"proc_ms": 4}], "proc_ms 4 goes back"),
        ([{"watermark_ms": 5}, {"watermark_ms": 4}], "watermark 4 goes back"),
    ],
)
def test_time_never_goes_back(tmp_path, steps, message):
    path = tmp_path / "t.jsonl"
    write_timeline(path, steps)
    with pytest.raises(ValueError, match=message):
        Timeline(str(path))


def test_reserved_column_names(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        write_timeline(tmp_path / "t.jsonl", [], columns={"ts": "bigint"})


@pytest.mark.spark
def test_one_step_per_micro_batch(spark, tmp_path):
    path = tmp_path / "t.jsonl"
    write_timeline(path, STEPS, columns={"value": "double"})
    df = read_replay(spark, path)
    assert df.isStreaming
    batches: dict[int, list] = {}

    def collect(batch, batch_id):
        batches[batch_id] = sorted(
            (tuple(r) for r in batch.collect()), key=lambda r: (r[0], str(r[1]))
        )

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    # kind, key, ts, value, watermark_ms, proc_ms, step
    assert batches == {
        0: [
            ("data", "a", 1000, 3.0, None, 0, 0),
            ("data", "b", 1500, 1.0, None, 0, 0),
            ("tick", None, None, None, None, 0, 0),
        ],
        1: [("tick", None, None, None, 2000, 0, 1)],
        2: [("clock", None, None, None, 2000, 5000, 2)],  # neither rows nor a watermark
        3: [  # processing time moves to 6000: the step fires the timers due by then
            ("clock", None, None, None, MAX_TIMESTAMP, 6000, 3),
            ("data", "a", 400, 2.0, MAX_TIMESTAMP, 6000, 3),
        ],
    }
