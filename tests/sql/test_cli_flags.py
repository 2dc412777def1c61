"""``headwater sql --explain`` and ``--no-fast-path``: the plan without a run, and
the per-query fast-path switch of Python (``fast_path=False``) on the command line,
for a query and for every query of a script; and the DuckDB sink of the docs' Python
example making its directory on a fresh checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

import headwater.sql.script as script
from headwater.sql.cli import main

QUERY = (
    "SELECT wstart, wend, SUM(price) AS total FROM Tumble(data => TABLE(Bid), "
    "timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE) GROUP BY wstart, wend"
)
BIDS = Path(__file__).parent / "data" / "paper" / "bids.jsonl"
REPLAY = ["--replay", f"Bid={BIDS}", "--event-time", "Bid.bidtime"]


def test_explain_names_the_path_and_the_switch(capsys) -> None:
    assert main([QUERY, *REPLAY, "--explain"]) == 0
    assert "runs on: fast path" in capsys.readouterr().out
    assert main([QUERY, *REPLAY, "--explain", "--no-fast-path"]) == 0
    out = capsys.readouterr().out
    assert "runs on: general path" in out and "fast_path=False" in out


def test_no_fast_path_gives_the_same_table(capsys) -> None:
    assert main([QUERY, *REPLAY, "--format", "csv"]) == 0
    fast = capsys.readouterr().out
    assert main([QUERY, *REPLAY, "--format", "csv", "--no-fast-path"]) == 0
    assert capsys.readouterr().out == fast and fast.count("\n") == 3


@pytest.mark.parametrize("flags, expected", [([], True), (["--no-fast-path"], False)])
def test_a_script_passes_the_switch_to_each_query(
    tmp_path, monkeypatch, capsys, flags, expected
) -> None:
    seen = []
    bind = script.bind

    def recording(*args, **kwargs):
        seen.append(kwargs["fast_path"])
        return bind(*args, **kwargs)

    monkeypatch.setattr(script, "bind", recording)
    path = tmp_path / "q.sql"
    path.write_text(QUERY + ";\n" + QUERY + ";\n")
    assert main(["-f", str(path), *REPLAY, *flags]) == 0
    assert seen == [expected, expected]
    assert capsys.readouterr().out.count("2020-04-15") == 8


def test_explain_of_a_script_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "q.sql"
    path.write_text(QUERY + ";\n")
    assert main(["-f", str(path), *REPLAY, "--explain"]) == 2
    assert "--explain takes a query, not a script" in capsys.readouterr().err


def test_a_relation_sink_makes_its_directory(tmp_path) -> None:
    """A DuckDB file in a directory that does not exist yet (the docs' Python
    example writes tmp/sql-docs/python.duckdb on a fresh checkout)."""
    import headwater as hw
    from headwater.io.sinks.relation import RelationSink
    from headwater.sql.execute.replay import read_replay

    bids = read_replay(str(BIDS), "Bid", "bidtime")
    sink = RelationSink(tmp_path / "new" / "dir" / "t.duckdb", table="totals")
    hw.sql(QUERY, {"Bid": bids}).write(sink)
    assert len(sink.read()) == 2
