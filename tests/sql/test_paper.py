"""The paper's running example and Flink's documented window TVF results
(``data/paper/expected.yaml``; where each comes from: ``data/paper/SOURCES.md``).

Every case runs on the local runner. The stream cases (input ``bids.jsonl``) run on
Spark too, one streaming run per query and trigger: a case's table view as of a
processing time is that run's changelog applied up to then, and EMIT STREAM with
the same trigger reads the same changelog (both equivalences are checked locally
below, where runs are cheap). The command line prints them too, on both runners.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sql_helpers import (
    assert_same_rows,
    expected_rows,
    one_shuffle_partition,
    result,
    rows,
    spark_runs,
    trigger_of,
    without_emit,
)
from sqlglot import exp

from headwater.sql import cli, read_replay, sql
from headwater.sql.errors import SqlError
from headwater.sql.execute.replay import millis
from headwater.sql.parse.dialect import parse_query

DATA = Path(__file__).parent / "data" / "paper"
CASES = yaml.safe_load((DATA / "expected.yaml").read_text(encoding="utf-8"))
STREAM_CASES = [c for c in CASES if c["input"].endswith(".jsonl")]


def query_of(case: dict) -> str:
    """The query as it runs: the paper's Query 7 with its two slips fixed
    (``query_runnable``, see SOURCES.md), else as printed."""
    return case.get("query_runnable") or case["query"]


def tables_of(case: dict) -> dict:
    path = DATA / case["input"]
    if path.suffix == ".jsonl":
        return {"Bid": read_replay(path, "Bid", "bidtime")}
    return {"Bid": pd.read_csv(path, parse_dates=["bidtime"])}


def as_of(case: dict) -> int | None:
    return None if case["as_of"] is None else millis(case["as_of"], "as_of")


def named_columns(case: dict) -> list[int]:
    """Positions whose header the fixture fixes: all but unaliased expressions
    (the Flink docs print ``SUM(price)`` under ``price``; engines name it otherwise)."""
    query = parse_query(query_of(case))
    items = query.selects if isinstance(query, exp.Select) else []
    if not items or any(isinstance(i, exp.Star) for i in items):
        return list(range(len(case["columns"])))
    positions = [i for i, item in enumerate(items) if isinstance(item, exp.Column | exp.Alias)]
    return positions + list(range(len(items), len(case["columns"])))  # undo, ptime, ver


def check(case: dict, frame: pd.DataFrame, what: str = "") -> None:
    """``frame`` is the case's result: its columns, and its rows in order (a
    changelog) or as a multiset (a table), numbers as floats, times as ISO."""
    if "window_time" in frame.columns and "window_time" not in case["columns"]:
        # FLIP-145's draft prints no window_time; Flink's released TVFs (and headwater) add it
        frame = frame.drop(columns="window_time")
    assert len(frame.columns) == len(case["columns"]), list(frame.columns)
    for i in named_columns(case):
        assert frame.columns[i] == case["columns"][i], list(frame.columns)
    assert_same_rows(
        rows(frame), expected_rows(case["rows"]), case["ordered"], f"{case['name']} {what}"
    )


# ------------------------------------------------------------------ local runner


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_case_on_the_local_runner(case: dict) -> None:
    check(case, sql(query_of(case), tables_of(case)).to_pandas(as_of(case)), "local")


@pytest.mark.parametrize("case", [c for c in STREAM_CASES if c["as_of"]], ids=lambda c: c["name"])
def test_a_table_view_is_the_whole_changelog_applied_up_to_its_time(case: dict) -> None:
    """What lets one Spark run serve every as_of: steps after ``as_of`` change nothing
    materialized up to ``as_of``."""
    query = sql(query_of(case), tables_of(case))
    up_to = query.run(as_of(case))
    whole = query.run(None)
    assert rows(up_to.table(as_of(case))) == rows(whole.table(as_of(case)))
    assert rows(up_to.changelog) == rows(whole.changelog[whole.changelog["ptime"] <= as_of(case)])


@pytest.mark.parametrize("case", [c for c in STREAM_CASES if c["stream"]], ids=lambda c: c["name"])
def test_stream_and_table_renderings_share_one_changelog(case: dict) -> None:
    """EMIT STREAM changes the rendering only: the same query with the same trigger
    and without STREAM has the same changelog."""
    text = query_of(case)
    trigger = trigger_of(text)
    table = without_emit(text) + (f"\nEMIT {trigger}" if trigger else "")
    stream_log = sql(text, tables_of(case)).run().changelog
    table_log = sql(table, tables_of(case)).run().changelog
    assert rows(stream_log) == rows(table_log)


def test_the_paper_query_as_printed_is_rejected_with_a_position() -> None:
    """The paper's Query 7 groups by ``wend`` only while selecting ``wstart``: the
    error points at the subquery's ``wstart``, not at the outer query's namesake."""
    case = next(c for c in CASES if c["name"] == "paper_q7_table_813")
    text = case["query"]
    with pytest.raises(SqlError) as info:
        sql(text, tables_of(case)).to_pandas()
    index = text.index("TumbleBid.wstart wstart")
    line, col = text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)
    assert (info.value.line, info.value.col) == (line, col), str(info.value)
    assert "wstart" in info.value.message and "GROUP BY" in info.value.message


# ------------------------------------------------------------------ Spark


def run_key(case: dict) -> tuple[str, str]:
    """Cases that share a Spark run: the same query and trigger (STREAM aside)."""
    text = query_of(case)
    return without_emit(text), trigger_of(text)


@pytest.fixture(scope="module")
def spark_paper_runs(spark) -> dict:
    """One streaming run per distinct query and trigger, all at once."""
    from headwater.sql.execute.spark import SparkSqlQuery

    first = {}
    for case in STREAM_CASES:
        first.setdefault(run_key(case), case)

    def job(case):
        return lambda: SparkSqlQuery(query_of(case), tables_of(case), spark=spark).run(None)

    return spark_runs(spark, {key: job(case) for key, case in first.items()})


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", STREAM_CASES, ids=lambda c: c["name"])
def test_stream_case_on_spark(case: dict, spark_paper_runs: dict) -> None:
    run = result(spark_paper_runs, run_key(case))
    frame = run.changes() if case["stream"] else run.table(as_of(case))
    check(case, frame, "spark")


# ------------------------------------------------------------------ command line


def run_cli(capsys, case: dict, runner: str) -> tuple[int, pd.DataFrame, str]:
    argv = [
        query_of(case),
        "--replay",
        f"Bid={DATA / case['input']}",
        "--event-time",
        "Bid.bidtime",
        "--format",
        "csv",
        "--runner",
        runner,
    ]
    if case["as_of"]:
        argv += ["--as-of", case["as_of"]]
    status = cli.main(argv)
    out, err = capsys.readouterr()
    frame = pd.read_csv(io.StringIO(out)) if out.strip() else pd.DataFrame()
    return status, frame, err


@pytest.mark.parametrize("case", STREAM_CASES, ids=lambda c: c["name"])
def test_command_line_local(capsys, case: dict) -> None:
    status, frame, err = run_cli(capsys, case, "local")
    assert status == 0, err
    check(case, frame, "cli local")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", ["paper_q7_emit_stream", "paper_q7_table_813"])
def test_command_line_spark(capsys, spark, name: str) -> None:
    """The second runs only up to its ``--as-of``; the first with the session's
    shuffle partitions (its windows' groups in several shards)."""
    case = next(c for c in CASES if c["name"] == name)
    partitions = one_shuffle_partition(spark) if case["as_of"] else contextlib.nullcontext()
    with partitions:
        status, frame, err = run_cli(capsys, case, "spark")
    assert status == 0, err
    check(case, frame, "cli spark")
