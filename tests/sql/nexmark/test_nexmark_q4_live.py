"""NEXMark q4 in two stages on a live Spark file stream (stage 1 the streaming
query, stage 2 on the driver in its foreachBatch: headwater/sql/execute/
stages_spark.py), micro-batch by micro-batch: each batch's changelog equals the
local runner's step over the same arrivals (a replay whose step k holds file k
of every table), not only the final table (test_nexmark_spark_files.py). Three
files per table, one micro-batch each, some rows behind the watermark."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from live_changelog import Recorder, final_rows, local_steps
from test_nexmark_queries import insert_query
from test_nexmark_spark_files import file_stream_script, one_file_per_batch

from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write
from headwater.sql import sql

pytestmark = pytest.mark.spark

#: 450 events over 4.5 s of event time, up to 6 s out of order against the DDL's
#: watermark of 4 s: three files per table of 150 arrivals each.
CONFIG = NexmarkConfig(events=450, seed=3, first_event_rate=100, out_of_order_ms=6000)
EVENTS_PER_FILE = 150
#: The replay's step k (epoch ms): after every event time, one step per file.
STEP_MS = 10**13


def replay_of_files(data: Path, out: Path) -> None:
    """``out/<table>.jsonl``: file k of ``data/<table>/`` at step k (no watermark
    lines: the DDL's watermark follows the rows, as on the file stream)."""
    out.mkdir()
    for folder in sorted(p for p in data.iterdir() if p.is_dir()):
        lines = []
        for k, path in enumerate(sorted(folder.glob("*.parquet")), 1):
            frame = pq.read_table(path).to_pandas()
            for column in frame.select_dtypes("datetime").columns:
                frame[column] = frame[column].map(lambda t: t.isoformat(timespec="milliseconds"))
            records = frame.to_dict("records")
            lines += [json.dumps({"ptime": k * STEP_MS, "row": r}) for r in records]
        (out / f"{folder.name}.jsonl").write_text("".join(line + "\n" for line in lines))


def test_q4_on_a_file_stream_equals_the_local_runner_batch_by_batch(spark, tmp_path):
    from headwater.sql.execute.spark import SparkSqlQuery

    data = tmp_path / "files"
    events = generate(CONFIG)
    write(events, data, ["parquet"], events_per_file=EVENTS_PER_FILE)
    text = file_stream_script("q4", data)
    query, tables, functions = insert_query("q4", data, text=text, source=one_file_per_batch(spark))
    run = SparkSqlQuery(query, tables, "q4", functions, spark=spark)
    assert "stage 2 runs on the driver" in run.explain()
    sink, letters = Recorder(), Recorder()
    run.start(
        checkpoint_location=str(tmp_path / "ck"),
        sink=sink,
        dead_letter_sink=letters,
        trigger={"availableNow": True},
    ).awaitTermination()

    replay = tmp_path / "replay"
    replay_of_files(data, replay)
    query, tables, functions = insert_query("q4", replay)
    local = sql(query, tables, functions=functions).run(None)
    expected = local_steps(local.changelog)
    assert len(expected) >= 3, "q4 changes at too few steps to check them"
    assert sink.steps() == expected
    assert final_rows(sink.log()) == final_rows(local.changelog)
    # the same dead letters (none: a late row still joins and updates its group)
    dropped = letters.log() if letters.batches else pd.DataFrame(columns=["table"])
    late = local.dead_letters
    assert sorted(dropped["table"]) == sorted(late["table"])
    assert behind_the_watermark(data / "bid"), "no bid arrives late: the stream is too tidy"


def behind_the_watermark(folder: Path) -> bool:
    """Whether a file holds a row older than the watermark the files before it
    leave (their latest event time less the DDL's 4 s)."""
    latest = None
    for path in sorted(folder.glob("*.parquet")):
        times = pq.read_table(path, columns=["dateTime"]).column(0).to_pandas()
        if latest is not None and times.min() < latest - pd.Timedelta(seconds=4):
            return True
        latest = times.max() if latest is None else max(latest, times.max())
    return False
