"""The NEXMark bench harness on a tiny event count (timings never asserted)."""

from __future__ import annotations

import json

import duckdb

from headwater.bench.nexmark import main, markdown
from headwater.nexmark import NexmarkConfig, generate


def test_harness_reports_runs_and_refusals(capsys, tmp_path):
    argv = ["--queries", "q0,q2", "--events", "300", "--json", "--seed", "3"]
    rc = main([*argv, "--workdir", str(tmp_path)])
    assert rc == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["events"] == 300 and result["runner"] == "local"
    q0, q2 = result["queries"]["q0"]["headwater"], result["queries"]["q2"]["headwater"]
    assert q0["status"] == "refused" and "Expecting )" in q0["reason"]
    assert q2["status"] == "ran" and q2["seconds"] > 0
    # The rows the harness counts are the query's rows over the same events.
    config = NexmarkConfig(events=300, seed=3, first_event_rate=1000, out_of_order_ms=2000)
    events = generate(config)
    with duckdb.connect() as con:
        con.register("bid", events.tables["bid"])
        expected = con.execute("SELECT count(*) FROM bid WHERE auction % 123 = 0").fetchone()[0]
    assert q2["rows"] == expected
    assert "q0: headwater: refused" in captured.err and "q2: headwater:" in captured.err
    table = markdown(result)
    assert "| q0 | refused: line " in table and f"| q2 | ran: {expected} rows, " in table


def test_unknown_query(capsys):
    assert main(["--queries", "q99", "--events", "10"]) == 2
    assert "unknown queries" in capsys.readouterr().err
