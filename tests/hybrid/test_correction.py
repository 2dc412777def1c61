"""The batch module: archive, the Gamma rule, corrections into the changelog and the
current-results table (DuckDB; PostgreSQL with HEADWATER_TEST_POSTGRES), restarts."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pandas as pd
import pytest

from headwater.hybrid.correction import Archive, correction_batch_id
from headwater.hybrid.generator import PROFILES, generate
from headwater.hybrid.hpm import apply_corrections, results_sink, run_stream
from headwater.hybrid.pipeline import Query, estimate_requirement, quality_driven, with_batches
from headwater.io.sinks import ChangelogSink, CurrentResultsSink
from headwater.model.correction import correction_points
from headwater.runners.local import run_frame

Q = Query()
KEYS = [Q.key, "window_start", "window_end"]
GAMMA = 2000


@pytest.fixture(scope="module")
def case():
    """A short game2 stream, its quality-driven stream run (2 shards) and exact results."""
    stream = with_batches(generate(PROFILES["game2"], seed=2, events=40_000), Q)
    req = estimate_requirement(stream, Q, 0.05, 0.05)
    run = run_stream(stream, Q, quality_driven(req, Q, 0.2, 4.0), shards=2)
    truth = run_frame(stream, Q.plan(stream, None)).panes[[*KEYS, Q.output]]
    assert len(run.dead_letters) > 0  # the case has something to correct
    return stream, run, truth


def _signed_changelog(directory) -> pd.Series:
    log = ChangelogSink(directory / "changelog").read()
    sign = np.where(log["is_retraction"], -1, 1)
    return (log[Q.output] * sign).groupby([log[k] for k in KEYS]).sum()


def _check_exact(table: pd.DataFrame, truth: pd.DataFrame) -> None:
    merged = truth.merge(table[[*KEYS, Q.output]], on=KEYS, how="left", suffixes=("", "_t"))
    assert merged[f"{Q.output}_t"].notna().all()
    assert (merged[Q.output] == merged[f"{Q.output}_t"]).all()


def test_corrections_make_the_table_exact_and_the_changelog_sums_to_it(case, tmp_path):
    stream, run, truth = case
    applied = apply_corrections(stream, run, Q, tmp_path, gamma=GAMMA)
    assert len(applied) > 1
    table = results_sink(tmp_path, Q).read()
    _check_exact(table, truth)
    signed = _signed_changelog(tmp_path)
    stored = table.set_index(KEYS)[Q.output]
    assert signed.reindex(stored.index).eq(stored).all()  # nothing counted twice
    again = apply_corrections(stream, run, Q, tmp_path, gamma=GAMMA)
    assert again == []  # a finished run applies nothing twice


def test_a_restart_after_a_crash_ends_with_the_same_results(case, tmp_path, monkeypatch):
    stream, run, truth = case
    crash_at = correction_batch_id(1)
    real_write = CurrentResultsSink.write

    def crashing(self, batch, batch_id):
        if batch_id == crash_at:
            raise RuntimeError("killed")
        return real_write(self, batch, batch_id)

    monkeypatch.setattr(CurrentResultsSink, "write", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        apply_corrections(stream, run, Q, tmp_path, gamma=GAMMA)
    monkeypatch.setattr(CurrentResultsSink, "write", real_write)
    resumed = apply_corrections(stream, run, Q, tmp_path, gamma=GAMMA)
    assert resumed[0].number == 1  # correction 0 was applied before the crash
    table = results_sink(tmp_path, Q).read()
    _check_exact(table, truth)
    stored = table.set_index(KEYS)[Q.output]
    assert _signed_changelog(tmp_path).reindex(stored.index).eq(stored).all()


def test_a_late_stream_pane_does_not_undo_a_correction(tmp_path):
    sink = results_sink(tmp_path, Q)
    row = {Q.key: 1, "window_start": 0, "window_end": 500, "timestamp": 499, "timing": "LATE"}
    flags = {"is_first": False, "is_last": True, "is_retraction": False}
    correction = pd.DataFrame([{**row, Q.output: 10, "pane_index": 1, **flags}])
    stream_pane = pd.DataFrame([{**row, Q.output: 7, "pane_index": 0, **flags}])
    sink.write(correction.assign(nonspeculative_index=1), 1)
    sink.write(stream_pane.assign(nonspeculative_index=0, timing="ON_TIME"), 2)
    assert sink.read()[Q.output].tolist() == [10]


def test_correction_points_follow_the_gamma_rule():
    arrival = np.array([1, 1, 2, 3, 3, 4, 5])
    event_time = np.array([100, 50, 120, 90, 200, 10, 20])
    # spans: {100, 50, 120} = 70; + {90, 200} -> 150 > 100 at time 3; then {10} 0, {20} 10
    assert correction_points(arrival, event_time, 100) == [3]
    assert correction_points(arrival[:0], event_time[:0], 100) == []


def test_archive_reads_only_the_buckets_of_a_range(tmp_path):
    archive = Archive(tmp_path, Q, bucket_ms=1000)
    rows = pd.DataFrame({Q.key: [1, 1, 1], Q.event_time: [100, 1500, 5200], Q.value: [1, 2, 3]})
    archive.append(rows, chunk=0)
    archive.append(rows.assign(**{Q.value: 9}), chunk=0)  # the chunk again: overwritten
    files = archive.files(1000, 2000)
    assert len(files) == 1 and "bucket=1" in files[0]
    assert archive.read(archive.files(0, 6000), 0, 6000)[Q.value].tolist() == [9, 9, 9]


@pytest.mark.postgres
def test_corrections_into_postgres(case, tmp_path):
    url = os.environ.get("HEADWATER_TEST_POSTGRES", "").strip()
    if not url:
        pytest.skip("HEADWATER_TEST_POSTGRES is not set (export it from scripts/postgres.sh)")
    stream, run, truth = case
    table = f"hpm_{uuid.uuid4().hex[:8]}"
    sink = CurrentResultsSink(url, table=table, key_cols=(Q.key,))
    try:
        apply_corrections(stream, run, Q, tmp_path, gamma=GAMMA, results=sink)
        _check_exact(sink.read(), truth)
    finally:
        sink.reset()
        sink.close()
