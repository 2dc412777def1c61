"""The NEXMark bench harness on a tiny event count (timings never asserted)."""

from __future__ import annotations

import gc
import json
import os

import duckdb
import pyarrow.parquet as pq
import pytest

from headwater.bench.baselines.nexmark_flink import flink_python, parquet_jar
from headwater.bench.collector import collector_time
from headwater.bench.nexmark import (
    latency_markdown,
    main,
    markdown,
    median_run,
    parse_args,
    run_order,
    sink_rows,
)
from headwater.nexmark import NexmarkConfig, generate


def test_harness_reports_runs_and_refusals(capsys, tmp_path):
    argv = ["--queries", "q6,q2", "--events", "300", "--json", "--seed", "3", "--repeat", "3"]
    rc = main([*argv, "--workdir", str(tmp_path)])
    assert rc == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["events"] == 300 and result["runner"] == "local"
    q6, q2 = result["queries"]["q6"]["headwater"], result["queries"]["q2"]["headwater"]
    assert q6["status"] == "refused" and "no table or alias A" in q6["reason"]
    assert q2["status"] == "ran" and q2["seconds"] > 0
    assert len(q2["runs"]) == 3 and q2["seconds"] == sorted(q2["runs"])[1]  # the median
    # The rows the harness counts are the query's rows over the same events.
    config = NexmarkConfig(events=300, seed=3, first_event_rate=1000, out_of_order_ms=2000)
    events = generate(config)
    with duckdb.connect() as con:
        con.register("bid", events.tables["bid"])
        expected = con.execute("SELECT count(*) FROM bid WHERE auction % 123 = 0").fetchone()[0]
    assert q2["rows"] == expected
    assert "q6: headwater: refused" in captured.err and "q2: headwater:" in captured.err
    table = markdown(result)
    assert "| q6 | refused: " in table and f"| q2 | ran: {expected} rows, " in table


def test_the_median_run_of_a_repeat():
    """``--repeat``: the median run (the lower middle one: a run that happened), every
    run's seconds, the row counts when they differ, and a run that failed over any."""
    ran = [{"status": "ran", "seconds": s, "rows": 5} for s in (3.0, 1.0, 2.0, 4.0)]
    assert median_run(ran) == {"status": "ran", "seconds": 2.0, "rows": 5, "runs": [3, 1, 2, 4]}
    assert median_run(ran[:1]) == ran[0]
    odd = [*ran[:2], {"status": "ran", "seconds": 9.0, "rows": 6}]
    assert median_run(odd)["seconds"] == 3.0 and median_run(odd)["rows_per_run"] == [5, 5, 6]
    failed = {"status": "failed", "reason": "x"}
    assert median_run([ran[0], failed, ran[1]]) == failed


def test_a_query_that_fails_is_reported_and_the_next_runs(capsys, tmp_path, monkeypatch):
    """An exception from inside a run (e.g. Spark's when a Python worker did not connect
    back) is the query's status, not the end of the benchmark."""
    from headwater.bench import nexmark

    real = nexmark.run_script

    def flaky(text, **options):
        if "nexmark_q0" in text:
            raise RuntimeError("Python worker failed to connect back.\njava stack")
        return real(text, **options)

    monkeypatch.setattr(nexmark, "run_script", flaky)
    argv = ["--queries", "q0,q2", "--events", "300", "--json", "--workdir", str(tmp_path)]
    assert main(argv) == 0
    queries = json.loads(capsys.readouterr().out)["queries"]
    assert queries["q0"]["headwater"] == {
        "status": "failed",
        "reason": "RuntimeError: Python worker failed to connect back.",
    }
    assert queries["q2"]["headwater"]["status"] == "ran"


def test_each_engine_warms_up_on_its_own_events_first(capsys, tmp_path):
    """Each query runs once untimed over ``--warmup-events`` events in ``warmup/``
    (its own data and sink) before its timed runs; with ``--order headwater-first``
    the first query only; ``--warmup-events 0`` skips it."""
    argv = ["--queries", "q1,q2", "--events", "300", "--json"]
    assert main([*argv, "--warmup-events", "200", "--workdir", str(tmp_path / "a")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["queries"]["q1"]["headwater"]["status"] == "ran"
    assert result["config"]["order"] == "fair"
    warm = tmp_path / "a" / "warmup"
    config = NexmarkConfig(events=200, seed=0, first_event_rate=1000, out_of_order_ms=2000)
    bids = generate(config).tables["bid"]  # q1: every bid, over its own 200 events
    assert sink_rows(warm / "q1-local.duckdb", "q1") == bids.num_rows
    with duckdb.connect() as con:
        con.register("bid", bids)
        q2 = con.execute("SELECT count(*) FROM bid WHERE auction % 123 = 0").fetchone()[0]
    assert (warm / "q2-local.duckdb").exists() and sink_rows(warm / "q2-local.duckdb", "q2") == q2
    old = ["--order", "headwater-first", "--workdir", str(tmp_path / "c")]
    assert main([*argv, "--warmup-events", "200", *old]) == 0
    capsys.readouterr()
    assert (tmp_path / "c" / "warmup" / "q1-local.duckdb").exists()
    assert not (tmp_path / "c" / "warmup" / "q2-local.duckdb").exists()
    assert main([*argv, "--warmup-events", "0", "--workdir", str(tmp_path / "b")]) == 0
    assert not (tmp_path / "b" / "warmup").exists()


def test_the_fair_order_alternates_the_engine_that_runs_first():
    """``--order fair``: headwater first on the 1st, 3rd ... query, Spark's own on the
    others; ``headwater-first`` keeps ``--engines``' order; Flink runs after, apart."""
    engines = ["headwater", "spark", "flink"]
    fair = parse_args(["--runner", "spark"])
    assert fair.order == "fair"
    assert [run_order(fair, i, engines) for i in range(3)] == [
        ["headwater", "spark"],
        ["spark", "headwater"],
        ["headwater", "spark"],
    ]
    old = parse_args(["--order", "headwater-first"])
    assert [run_order(old, i, engines) for i in range(2)] == [["headwater", "spark"]] * 2
    assert run_order(fair, 1, ["headwater"]) == ["headwater"]


def test_unknown_query(capsys):
    assert main(["--queries", "q99", "--events", "10"]) == 2
    assert "unknown queries" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_harness_on_spark(spark, capsys, tmp_path):
    """headwater on the Spark runner and Spark's own query over the same Parquet
    file stream (one file per table: one micro-batch)."""
    argv = ["--queries", "q0,q2,q6", "--events", "300", "--events-per-file", "300", "--json"]
    rc = main([*argv, "--runner", "spark", "--seed", "3", "--workdir", str(tmp_path)])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    queries = result["queries"]
    assert [queries["q0"][e]["status"] for e in ("headwater", "spark")] == ["ran", "ran"]
    config = NexmarkConfig(events=300, seed=3, first_event_rate=1000, out_of_order_ms=2000)
    bids = generate(config).tables["bid"]
    assert queries["q0"]["spark"]["rows"] == bids.num_rows
    q2 = [queries["q2"][engine] for engine in ("headwater", "spark")]
    assert [r["status"] for r in q2] == ["ran", "ran"]
    assert q2[0]["rows"] == q2[1]["rows"]
    assert queries["q6"]["spark"]["status"] == "not written"
    assert "not expressible" in queries["q6"]["spark"]["reason"]
    # The same workdir again: each engine starts from a new checkpoint (an earlier
    # run's would make Spark's own query read nothing and headwater's refuse its
    # ended input).
    argv = ["--queries", "q0", "--events", "300", "--warmup-events", "0", "--json"]
    assert main([*argv, "--runner", "spark", "--seed", "3", "--workdir", str(tmp_path)]) == 0
    again = json.loads(capsys.readouterr().out)["queries"]["q0"]
    assert [again[e]["status"] for e in ("headwater", "spark")] == ["ran", "ran"]
    assert again["spark"]["rows"] == again["headwater"]["rows"] == bids.num_rows


@pytest.mark.flink
@pytest.mark.slow
def test_harness_against_flink(capsys, tmp_path):
    """Flink's SQL (PyFlink) over the same events: timed in streaming mode over the
    Parquet files into the blackhole; its batch check's final table equals headwater's,
    row for row; a query Flink cannot run reports Flink's own error."""
    if flink_python() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Flink virtualenv: CI must run `bash scripts/flink.sh` first")
        pytest.skip("no Flink virtualenv (bash scripts/flink.sh)")
    assert parquet_jar() is not None, "scripts/flink.sh fetches the Parquet jar with the venv"
    argv = ["--queries", "q2,q3,q8,q14", "--events", "1000", "--engines", "headwater,flink"]
    argv += ["--repeat", "2"]
    rc = main([*argv, "--json", "--seed", "3", "--workdir", str(tmp_path)])
    assert rc == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["engines"] == ["headwater", "flink"]
    queries = result["queries"]
    config = NexmarkConfig(events=1000, seed=3, first_event_rate=1000, out_of_order_ms=2000)
    bids = generate(config).tables["bid"]
    with duckdb.connect() as con:
        con.register("bid", bids)
        expected = con.execute("SELECT count(*) FROM bid WHERE auction % 123 = 0").fetchone()[0]
    assert queries["q2"]["flink"]["rows"] == expected
    # Flink's JVM ran the first query once, untimed, over the warm-up events first
    warmup = queries["q2"]["flink"]["warmup"]
    assert warmup["status"] == "ran" and warmup["seconds"] > 0, warmup
    assert "warmup" not in queries["q3"]["flink"]
    for name in ("q2", "q3", "q8"):
        flink, ours = queries[name]["flink"], queries[name]["headwater"]
        assert flink["status"] == "ran" and flink["matches_headwater"] is True, name
        assert (flink["mode"], flink["source"], flink["check"]) == (
            "streaming",
            "parquet",
            "batch",
        ), name
        assert flink["differing"] == 0 and flink["rows"] == ours["rows"], name
        assert len(flink["runs"]) == len(ours["runs"]) == 2, name  # --repeat 2
        assert flink["seconds"] == min(flink["runs"]), name  # the lower middle of two
    assert queries["q8"]["flink"]["rows"] > 0
    q14 = queries["q14"]["flink"]
    assert q14["status"] == "failed" and "CountChar" in q14["reason"]
    assert "q2: flink: " in captured.err and "streaming mode, equal to headwater's" in captured.err
    assert "| headwater/flink |" in markdown(result)


@pytest.mark.spark
@pytest.mark.slow
def test_latency_mode_on_spark(spark, capsys, tmp_path):
    """Files fed at a rate to long-running queries: every fed event's latency comes
    from the checkpoint (its file's micro-batch committed), on both engines. Four
    files of each table: the first there at the start, three fed."""
    argv = ["--queries", "q0,q6", "--events", "400", "--rate", "400", "--latency", "--json"]
    argv += ["--sink", "blackhole"]  # both engines' rows counted by their noop writes
    rc = main([*argv, "--events-per-file", "100", "--runner", "spark", "--workdir", str(tmp_path)])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    q0 = result["queries"]["q0"]
    config = NexmarkConfig(events=400, seed=0, first_event_rate=400, out_of_order_ms=2000)
    bids = generate(config).tables["bid"].num_rows
    first = pq.read_metadata(tmp_path / "staged" / "bid" / "part-00000.parquet").num_rows
    for engine in ("headwater", "spark"):
        r = q0[engine]
        assert r["status"] == "ran", r
        # every bid arrived after the start has a latency; every bid is an output row
        assert r["events"] == bids - first and r["rows"] == bids
        assert 0 < r["p50_ms"] <= r["p99_ms"]
        # Spark's phases of the measured batches, to compare the engines phase by phase
        if r["batches"]:
            assert {"addBatch", "walCommit", "triggerExecution"} <= set(r["phase_median_ms"])
        # the JVM's compilations of generated code while the fed batches ran
        assert isinstance(r["compilations"], int) and r["compilations"] >= 0
    assert result["queries"]["q6"]["headwater"]["status"] == "refused"
    assert result["queries"]["q6"]["spark"]["status"] == "not written"
    # --order fair: q0 ran untimed on both engines over the warm-up events first
    warm = tmp_path / "warmup"
    assert (warm / "checkpoint-q0").is_dir()
    assert (warm / "native-checkpoint-q0" / "commits").is_dir()
    # and the first query's latency run once, untimed, on both engines, over a feed
    fed = tmp_path / "warmup-feed"
    assert (fed / "staged" / "bid").is_dir()
    assert list((fed / "latency-checkpoint-q0").rglob("commits"))
    assert (fed / "native-latency-checkpoint-q0" / "commits").is_dir()
    table = latency_markdown(result)
    assert "| q0 | " in table and "| query | engine | addBatch |" in table


def test_both_replay_forms_give_each_query_its_rows(capsys, tmp_path):
    """The local runner reads the replays in columns by default (``--replay parquet``)
    or as JSON lines: the same rows of every query, a stateless and a windowed one."""
    rows = {}
    for form in ("parquet", "jsonl"):
        argv = ["--queries", "q1,q5", "--events", "2000", "--json", "--replay", form]
        assert main([*argv, "--workdir", str(tmp_path / form)]) == 0
        queries = json.loads(capsys.readouterr().out)["queries"]
        rows[form] = {q: queries[q]["headwater"]["rows"] for q in queries}
    assert rows["parquet"] == rows["jsonl"] and rows["parquet"]["q1"] > 0
    assert (tmp_path / "parquet" / "data" / "bid.replay.parquet").exists()
    assert not (tmp_path / "parquet" / "data" / "bid.jsonl").exists()


def test_emit_after_watermark_where_the_planner_takes_it(capsys, tmp_path):
    """``--emit watermark``: a windowed query gives each window's row once (its final
    table, as Flink's window aggregation writes it); an unwindowed query (q20's
    join, whose groups never complete; q1's rows on their own) runs as written and
    says so."""
    runs = {}
    for emit in ("change", "watermark"):
        argv = ["--queries", "q5,q20,q1", "--events", "3000", "--json", "--emit", emit]
        argv += ["--sink", "blackhole", "--workdir", str(tmp_path / emit)]
        assert main(argv) == 0
        queries = json.loads(capsys.readouterr().out)["queries"]
        runs[emit] = {q: r["headwater"] for q, r in queries.items()}
    assert runs["watermark"]["q5"]["emit"] == "after watermark"
    assert runs["change"]["q5"]["emit"] == "every change"
    for run in (*runs["watermark"].values(), *runs["change"].values()):
        assert 0 <= run["gc_s"] <= run["seconds"]  # the collector's time, within the run
    assert runs["watermark"]["q20"]["emit"] == "every change"  # an unwindowed join
    assert runs["watermark"]["q20"]["rows"] == runs["change"]["q20"]["rows"]
    assert runs["watermark"]["q1"]["emit"] == "every change"  # rows on their own
    # every change of q5's windows against each window's final rows only
    assert 0 < runs["watermark"]["q5"]["rows"] < runs["change"]["q5"]["rows"]
    argv = ["--queries", "q5", "--events", "3000", "--json", "--workdir", str(tmp_path / "t")]
    assert main(argv) == 0
    table = json.loads(capsys.readouterr().out)["queries"]["q5"]["headwater"]
    assert runs["watermark"]["q5"]["rows"] == table["rows"]  # the final table's rows


def test_collector_time_counts_the_collections_of_its_block_only():
    """``gc_s``: each collection the block runs is timed; none after it."""
    with collector_time() as timed:
        for _ in range(3):
            gc.collect()
    assert timed.collections[2] == 3 and timed.seconds > 0
    gc.collect()
    assert timed.collections[2] == 3
