"""The rest of the SQL surface over streams, on the timelines of test_emit_modes:
window semi and anti joins (EXISTS, IN, NOT EXISTS), a join with a bounded
dimension table, subqueries in FROM and in WHERE, UNION ALL of two streams'
aggregates, an approximate aggregate with CASE and scalar functions, and ORDER
BY / LIMIT on a table view: several of these Spark's own streaming engine
refuses.

Locally each query's final table (and the view with ORDER BY / LIMIT) equals the
bounded query over the rows the streams kept, under two EMIT forms. On Spark
each one's changelog and dead letters equal the local runner's.
"""

from __future__ import annotations

import pandas as pd
import pytest
from sql_helpers import assert_same_rows, changelog_order, result, rows, spark_runs
from test_emit_modes import ASKS, BIDS, DAY, LATENESS, bounded_tables, tumble

from headwater.sql import SqlError, read_replay, sql

BID, ASK = tumble("Bid", "bidtime"), tumble("Ask", "asktime")
SAME_WINDOW = "A.wstart = B.wstart AND A.wend = B.wend"
#: A bounded dimension table: every item's category.
ITEMS = pd.DataFrame({"item": ["A", "B", "C"], "category": ["x", "y", "x"]})

QUERIES = {
    "semi_exists": f"SELECT B.wstart, B.wend, B.item, B.price FROM {BID} B WHERE EXISTS "
    f"(SELECT 1 FROM {ASK} A WHERE {SAME_WINDOW} AND A.item = B.item)",
    "semi_in": f"SELECT B.wstart, B.wend, B.item, B.price FROM {BID} B WHERE B.item IN "
    f"(SELECT A.item FROM {ASK} A WHERE {SAME_WINDOW})",
    "anti": f"SELECT B.wstart, B.wend, B.item, B.price FROM {BID} B WHERE NOT EXISTS "
    f"(SELECT 1 FROM {ASK} A WHERE {SAME_WINDOW} AND A.item = B.item)",
    "dimension": "SELECT B.wstart, B.wend, I.category, COUNT(*) AS n, SUM(B.price) AS total "
    f"FROM {BID} B JOIN Item I ON B.item = I.item GROUP BY B.wstart, B.wend, I.category",
    "from_subquery": "SELECT wstart, wend, item, hi FROM (SELECT wstart, wend, item, "
    f"MAX(price) AS hi FROM {BID} GROUP BY wstart, wend, item) S WHERE hi > 5",
    "where_subquery": f"SELECT wstart, wend, item, price FROM {BID} "
    "WHERE item IN (SELECT item FROM Item WHERE category = 'x')",
    "union_all": f"SELECT wstart, wend, 'bid' AS side, COUNT(*) AS n FROM {BID} "
    f"GROUP BY wstart, wend UNION ALL SELECT wstart, wend, 'ask' AS side, COUNT(*) AS n "
    f"FROM {ASK} GROUP BY wstart, wend",
    "approx_case": "SELECT wstart, wend, APPROX_COUNT_DISTINCT(item) AS items, "
    "CASE WHEN MAX(price) > 8 THEN 'high' ELSE 'low' END AS level, "
    f"ROUND(AVG(price), 2) AS mean, LOWER(MIN(item)) AS first FROM {BID} GROUP BY wstart, wend",
}
#: A table view's ORDER BY / LIMIT (not allowed with EMIT STREAM).
TOP3 = (
    f"SELECT wstart, wend, item, SUM(price) AS total FROM {BID} "
    "GROUP BY wstart, wend, item ORDER BY total DESC LIMIT 3"
)
EMITS = ["", "EMIT STREAM AFTER WATERMARK"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict:
    from sql_helpers import write_replay

    folder = tmp_path_factory.mktemp("surface")
    bid = write_replay(folder / "bid.jsonl", DAY, BIDS, "bidtime", ("bidtime", "price", "item"))
    ask = write_replay(folder / "ask.jsonl", DAY, ASKS, "asktime", ("asktime", "price", "item"))
    return {
        "Bid": read_replay(bid, "Bid", "bidtime", allowed_lateness=LATENESS),
        "Ask": read_replay(ask, "Ask", "asktime", allowed_lateness=LATENESS),
        "Item": ITEMS,
    }


def kept() -> dict[str, pd.DataFrame]:
    return {**bounded_tables(), "Item": ITEMS}


def _query(text: str, emit: str) -> str:
    return f"{text}\n{emit}" if emit else text


@pytest.mark.parametrize("emit", EMITS, ids=lambda e: e or "no EMIT")
@pytest.mark.parametrize("name", QUERIES)
def test_final_table_is_the_bounded_query(tables, name: str, emit: str) -> None:
    run = sql(_query(QUERIES[name], emit), tables, name=name).run()
    bounded = sql(QUERIES[name], kept()).to_pandas()
    assert len(bounded), f"{name}: an empty result tests nothing"
    assert_same_rows(rows(run.table()), rows(bounded[run.columns]), ordered=False, what=name)


def test_order_by_and_limit_on_a_table_view(tables) -> None:
    view = sql(TOP3, tables, name="top3").to_pandas()
    bounded = sql(TOP3, kept()).to_pandas()
    assert len(view) == 3
    assert rows(view) == rows(bounded)  # ordered


@pytest.fixture(scope="module")
def spark_surface_runs(spark, tables) -> dict:
    from headwater.sql.execute.spark import SparkSqlQuery

    def job(name: str):
        text = _query(QUERIES[name], "EMIT STREAM")
        return lambda: SparkSqlQuery(text, tables, name=name, spark=spark).run(None)

    return spark_runs(spark, {name: job(name) for name in QUERIES})


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", QUERIES)
def test_spark_equals_local(tables, spark_surface_runs, name: str) -> None:
    spark_run = result(spark_surface_runs, name)
    local = sql(_query(QUERIES[name], "EMIT STREAM"), tables, name=name).run()
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))
    letters = ["query", "table", "reason"]
    assert_same_rows(
        rows(spark_run.dead_letters[letters]), rows(local.dead_letters[letters]), ordered=False
    )


@pytest.mark.parametrize(
    "bound, at",
    [
        ("B.bidtime BETWEEN M.wstart AND M.wend", "B.bidtime BETWEEN"),
        ("B.bidtime >= M.wstart AND B.bidtime <= M.wend", "B.bidtime <="),
        ("B.bidtime >= M.wstart AND M.wend >= B.bidtime", "M.wend >="),
    ],
)
def test_an_inclusive_window_end_is_refused(tables, bound: str, at: str) -> None:
    """A row at ``wend`` is in the next window: of hopping windows, per-window
    maintenance and a bounded run would disagree about it, so the query is
    refused, with where (of tumbling windows such a row is kept in both windows'
    groups: tests/sql/test_q7_reach.py)."""
    size = "INTERVAL '10' MINUTE"
    hop = BID.replace("Tumble(", "Hop(").replace(size, f"{size}, INTERVAL '5' MINUTE")
    text = (
        "SELECT M.wstart, B.price FROM Bid B, (SELECT MAX(price) AS hi, wstart, wend "
        f"FROM {hop} GROUP BY wstart, wend) M WHERE B.price = M.hi AND {bound}"
    )
    with pytest.raises(SqlError) as raised:
        sql(text, tables)
    assert "M.wend" in raised.value.message and "< M.wend" in raised.value.hint
    assert (raised.value.line, raised.value.col) == (1, text.index(at) + 1)


def test_a_script_reports_and_writes_its_dead_letters(tmp_path, capsys) -> None:
    """``headwater sql -f``: the rows each query dropped, counted on stderr per
    query, and with ``--dead-letters DIR`` written there, a directory per query."""
    from headwater.sql.cli import main

    script = tmp_path / "late.sql"
    script.write_text(
        "CREATE TABLE Bid (bidtime TIMESTAMP, price BIGINT, item VARCHAR, "
        "WATERMARK FOR bidtime AS bidtime) "
        "WITH ('format' = 'replay', 'path' = 'docs/sql/late_bids.jsonl');\n"
        f"CREATE TABLE Log (wstart TIMESTAMP, n BIGINT) "
        f"WITH ('format' = 'changelog', 'path' = '{tmp_path / 'log'}');\n"
        "INSERT INTO Log SELECT wstart, COUNT(*) AS n FROM Tumble(data => TABLE(Bid), "
        "timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE) GROUP BY wstart, wend;\n"
    )
    assert main(["-f", str(script), "--dead-letters", str(tmp_path / "dead")]) == 0
    err = capsys.readouterr().err
    assert f"Log: 1 input rows dropped (late: 1); written to {tmp_path / 'dead' / 'Log'}" in err
    dead = pd.read_parquet(tmp_path / "dead" / "Log")
    # G, the late bid (the fast path of a windowed aggregate keeps its event time)
    assert [str(t) for t in dead["bidtime"]] == ["2020-04-15 08:08:00"]
    assert dead["reason"].tolist() == ["late"]
