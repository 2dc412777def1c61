"""The NEXMark bench harness on a tiny event count (timings never asserted)."""

from __future__ import annotations

import json

import duckdb
import pytest

from headwater.bench.nexmark import main, markdown
from headwater.nexmark import NexmarkConfig, generate


def test_harness_reports_runs_and_refusals(capsys, tmp_path):
    argv = ["--queries", "q14,q2", "--events", "300", "--json", "--seed", "3"]
    rc = main([*argv, "--workdir", str(tmp_path)])
    assert rc == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["events"] == 300 and result["runner"] == "local"
    q14, q2 = result["queries"]["q14"]["headwater"], result["queries"]["q2"]["headwater"]
    assert q14["status"] == "refused" and "CREATE" in q14["reason"]
    assert q2["status"] == "ran" and q2["seconds"] > 0
    # The rows the harness counts are the query's rows over the same events.
    config = NexmarkConfig(events=300, seed=3, first_event_rate=1000, out_of_order_ms=2000)
    events = generate(config)
    with duckdb.connect() as con:
        con.register("bid", events.tables["bid"])
        expected = con.execute("SELECT count(*) FROM bid WHERE auction % 123 = 0").fetchone()[0]
    assert q2["rows"] == expected
    assert "q14: headwater: refused" in captured.err and "q2: headwater:" in captured.err
    table = markdown(result)
    assert "| q14 | refused: line " in table and f"| q2 | ran: {expected} rows, " in table


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
