"""HPM on Spark: the K-slack watermarks in the Spark streaming runner give the local
runner's panes, dead letters and buffer; the batch module's corrections (bounded
Spark plan over the archive, fed online from the query's micro-batches) are the
local ones and make every window exact; a run killed in the middle of a correction
and restarted from its checkpoint ends with the same results."""

from __future__ import annotations

import pickle
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.hybrid.generator import PROFILES, generate
from headwater.hybrid.hpm import apply_corrections, results_sink, run_stream
from headwater.hybrid.on_spark import hpm_run, run_stream_query, write_inputs
from headwater.hybrid.pipeline import Query, estimate_requirement, quality_driven, with_batches
from headwater.hybrid.sparkrun import (
    StreamOutput,
    exact_panes,
    read_stream_run,
    source_tuples,
)
from headwater.io.sinks import ChangelogSink
from headwater.model.combiners import Sum
from headwater.model.slack import FixedSlack, MaxDelaySlack
from headwater.model.strategy import WindowingStrategy
from headwater.model.windows import SlidingWindows
from headwater.runners.local import run_frame
from headwater.runners.spark.isolated import run_isolated
from headwater.runners.spark.streaming import run_streaming, start_streaming

pytestmark = [pytest.mark.spark, pytest.mark.slow]

Q = Query()
KEYS = [Q.key, "window_start", "window_end"]
GAMMA = 1000  # ms: several corrections in a short stream
SHARDS = 3
FILE_MS = 1000  # a source file per second of arrival
FILES_PER_TRIGGER = 2
JOB = Path(__file__).with_name("spark_hpm_job.py")


@pytest.fixture(scope="module")
def case():
    """A short game1 stream: 3 s of event time, arriving over 10 s (its tail is late)."""
    stream = with_batches(generate(PROFILES["game1"], seed=3, events=10_000), Q)
    adaptive = quality_driven(estimate_requirement(stream, Q, 0.05, 0.05), Q, 0.2, 4.0)
    return stream, adaptive


@pytest.fixture(scope="module")
def clean(spark, case, tmp_path_factory):
    """An uninterrupted HPM run on Spark."""
    stream, adaptive = case
    work = tmp_path_factory.mktemp("hpm-clean")
    source = write_inputs(stream, Q, work, file_ms=FILE_MS)
    run, corrections = hpm_run(
        spark,
        source,
        Q,
        adaptive,
        gamma=GAMMA,
        shards=SHARDS,
        work=work,
        files_per_trigger=FILES_PER_TRIGGER,
    )
    assert len(corrections) >= 3  # the case has something to correct, more than once
    return work, source, run, corrections


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """The rows' ``columns`` (numbers as ints), sorted."""
    out = frame[columns].copy()
    for c in columns:
        if pd.api.types.is_numeric_dtype(out[c]):
            out[c] = out[c].astype("int64")
    return sorted(map(tuple, out.values.tolist()))


def _same_stream_run(got, want) -> None:
    pane_cols = [*KEYS, Q.output, "pane_index", "time"]
    assert _rows(got.panes, pane_cols) == _rows(want.panes, pane_cols)
    assert _rows(got.panes, ["timing"]) == _rows(want.panes, ["timing"])
    dead_cols = [*KEYS, "event_time", "time"]
    assert _rows(got.dead_letters, dead_cols) == _rows(want.dead_letters, dead_cols)
    assert len(got.shards) == len(want.shards)
    for a, b in zip(got.shards, want.shards, strict=True):
        assert np.array_equal(a.batch_times, b.batch_times)
        assert np.array_equal(a.trace.slack, b.trace.slack)
        assert np.array_equal(a.trace.watermarks, b.trace.watermarks)


def _corrections(corrections) -> list[tuple]:
    cols = [*KEYS, Q.output, "pane_index"]
    return [(c.time, _rows(c.rows, cols)) for c in corrections]


def test_a_k_slack_watermark_on_an_ordinary_spark_pipeline(spark, tmp_path):
    """The routing case of test_slack on the Spark streaming runner (run_streaming with
    FixedSlack): each arrival time one step, an ``end`` row ends the input; the panes
    and dead letters are the local runner's."""
    rows = [(0, 0), (50, 0), (150, 100), (420, 200), (230, 300), (90, 300), (1000, 400)]
    events = pd.DataFrame(rows, columns=["ts", "arrival"]).assign(k="a", v=1, kind="data")
    end = pd.DataFrame([{"ts": None, "arrival": 400, "k": None, "v": None, "kind": "end"}])
    pd.concat([events, end]).astype({"ts": "Int64", "v": "Int64"}).to_parquet(tmp_path / "in.pq")
    df = spark.readStream.schema("ts long, arrival long, k string, v long, kind string")
    out = run_streaming(
        df.parquet(str(tmp_path)),
        key_cols="k",
        event_time_col="ts",
        strategy=WindowingStrategy.of(SlidingWindows(0.2, 0.1)),
        aggregations={"n": (Sum(), "v")},
        watermark=FixedSlack(100),
        processing_time_col="arrival",
        timestamps="ms",
    )
    got = {}
    query = start_streaming(
        out,
        checkpoint_location=str(tmp_path / "ck"),
        panes_sink=lambda b, i: got.setdefault("panes", b.toPandas()),
        dead_letter_sink=lambda b, i: got.setdefault("dead", b.toPandas()),
        trigger={"availableNow": True},
    )
    query.awaitTermination(120)
    assert query.exception() is None
    local = (
        hw.from_pandas(events, event_time="ts", arrival_time="arrival", watermark=FixedSlack(100))
        .window(hw.SlidingWindows(0.2, 0.1))
        .group_by("k")
        .agg(n=hw.sum("v"))
    )
    cols = ["k", "window_start", "window_end", "n", "timing", "pane_index"]
    assert _rows(got["panes"], cols) == _rows(local.to_pandas(), cols)
    cols = ["k", "window_start", "window_end", "event_time"]
    assert _rows(got["dead"], cols) == _rows(local.dead_letters(), cols)
    assert sorted(got["dead"]["processing_time"]) == [300, 300, 300]


def test_quality_driven_stream_module_matches_the_local_runner(case, clean):
    stream, adaptive = case
    _same_stream_run(clean[2], run_stream(stream, Q, adaptive, SHARDS))


def test_mp_k_slack_matches_the_local_runner(spark, case, clean, tmp_path):
    stream, _ = case
    out = StreamOutput(tmp_path / "mp", Q)
    run_stream_query(spark, clean[1], Q, MaxDelaySlack(), 1, out, tmp_path / "mp")
    _same_stream_run(read_stream_run(tmp_path / "mp", Q), run_stream(stream, Q, MaxDelaySlack(), 1))


def test_corrections_are_the_local_ones_and_make_every_window_exact(spark, case, clean, tmp_path):
    stream, adaptive = case
    work, source, run, corrections = clean
    truth = run_frame(stream, Q.plan(stream, None)).panes
    assert _rows(exact_panes(source_tuples(spark, source), Q), [*KEYS, Q.output]) == _rows(
        truth, [*KEYS, Q.output]
    )
    local = apply_corrections(
        stream, run_stream(stream, Q, adaptive, SHARDS), Q, tmp_path, gamma=GAMMA
    )
    assert _corrections(corrections) == _corrections(local)
    table = results_sink(work / "hpm", Q).read()
    assert _rows(table, [*KEYS, Q.output]) == _rows(truth, [*KEYS, Q.output])
    _check_changelog(work, table)


def _check_changelog(work: Path, table: pd.DataFrame) -> None:
    """The changelog's signed sum per window is the table: nothing counted twice."""
    log = ChangelogSink(work / "hpm" / "changelog").read()
    signed = (
        (log[Q.output] * np.where(log["is_retraction"], -1, 1))
        .groupby([log[k] for k in KEYS])
        .sum()
    )
    stored = table.set_index(KEYS)[Q.output]
    assert signed.reindex(stored.index).eq(stored).all()
    assert len(signed) == len(stored)


def _run_until_killed(case, source, work: Path, crash_at: int) -> str:
    stream, adaptive = case
    job = {
        "source": source,
        "query": Q,
        "strategy": adaptive,
        "gamma": GAMMA,
        "shards": SHARDS,
        "work": str(work),
        "files_per_trigger": FILES_PER_TRIGGER,
        "crash_at": crash_at,
        "marker": str(work / "killed"),
    }
    (work / "job.pkl").write_bytes(pickle.dumps(job))
    done = run_isolated([sys.executable, str(JOB), str(work / "job.pkl")], timeout=600)
    assert done.returncode == -signal.SIGKILL, f"the job was not killed:\n{done.stderr[-3000:]}"
    return (work / "killed").read_text()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_run_killed_mid_correction_restarts_from_its_checkpoint(spark, case, clean, tmp_path):
    stream, adaptive = case
    clean_work, _, clean_run, clean_corrections = clean
    source = write_inputs(stream, Q, tmp_path, file_ms=FILE_MS)
    killed_at = _run_until_killed(case, source, tmp_path, crash_at=2)
    # Killed with a micro-batch in flight: some micro-batches were committed before.
    progress = (tmp_path / "hpm" / "online" / "progress.json").read_text()
    assert '"batch": -1' not in progress, progress
    changelog = tmp_path / "hpm" / "changelog" / f"batch_id={killed_at}"
    assert changelog.is_dir()  # the correction's changelog was written, its upsert was not

    run, corrections = hpm_run(
        spark,
        source,
        Q,
        adaptive,
        gamma=GAMMA,
        shards=SHARDS,
        work=tmp_path,
        files_per_trigger=FILES_PER_TRIGGER,
    )
    _same_stream_run(run, clean_run)  # no tuple lost or counted twice by the stream module
    assert [c.number for c in corrections] == [c.number for c in clean_corrections]
    assert _corrections(corrections) == _corrections(clean_corrections)
    table = results_sink(tmp_path / "hpm", Q).read()
    want = results_sink(clean_work / "hpm", Q).read()
    cols = [*KEYS, Q.output, "pane_index", "timing"]
    assert _rows(table, cols) == _rows(want, cols)
    _check_changelog(tmp_path, table)
