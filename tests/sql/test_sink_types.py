"""INSERT INTO a sink of declared column types (issue 16): a result column is
cast to its sink column's type where the cast keeps every value (SQL's store
assignment: a SUM into a DOUBLE column, an integer into a DECIMAL wide enough),
and the INSERT is refused before it runs, at the column, with the CAST to
write, where the cast can lose information (NEXMark q4/q17's AVG, a DOUBLE,
into a BIGINT column). The check runs before any sink is touched, so every
sink and both runners get the same types or the same refusal.
"""

from __future__ import annotations

import glob

import duckdb
import pandas as pd
import pytest
from sql_helpers import write_replay

from headwater.sql.errors import SqlError
from headwater.sql.execute.sink_types import kind_of, loss, needs_cast
from headwater.sql.script import run_script

STEPS = [
    ("10:05", [("10:01", 3, "a"), ("10:04", 9, "c")], None),
    ("10:07", [("10:12", 4, "b"), ("10:03", 5, "a")], "10:02"),
]


@pytest.fixture(scope="module")
def bids(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sink-types") / "bids.jsonl"
    return write_replay(path, "2024-01-01", STEPS, "bidtime", ("bidtime", "price", "item"))


def script(bids: str, sink_columns: str, select: str, sink: str) -> str:
    return (
        "CREATE TABLE Bid (bidtime TIMESTAMP(3), price BIGINT, item VARCHAR, "
        "WATERMARK FOR bidtime AS bidtime - INTERVAL '1' MINUTE) "
        f"WITH ('format' = 'replay', 'path' = '{bids}');\n"
        f"CREATE TABLE S ({sink_columns}) WITH ({sink});\n"
        f"INSERT INTO S {select};"
    )


@pytest.mark.parametrize(
    ("given", "declared", "lost", "cast"),
    [
        ("DOUBLE", "BIGINT", "drops the fraction", False),
        ("DECIMAL(10,2)", "INT", "drops the fraction", False),
        ("VARCHAR", "BIGINT", "is text, which may not parse as one", False),
        ("VARCHAR", "DOUBLE", "is text, which may not parse as one", False),
        ("TIMESTAMP", "DATE", "drops the time of day", False),
        ("DECIMAL(10,3)", "DECIMAL(10,2)", "drops digits of the fraction", False),
        ("DECIMAL(18,2)", "DECIMAL(10,2)", "can overflow it", False),
        ("BIGINT", "DECIMAL(10,2)", "can overflow it", False),
        ("BOOLEAN", "DATE", "is another kind of value", False),
        ("HUGEINT", "BIGINT", None, False),  # DuckDB's SUM of integers is SQL's BIGINT
        ("BIGINT", "DOUBLE", None, True),
        ("INTEGER", "BIGINT", None, True),
        ("BIGINT", "DECIMAL(38,2)", None, True),
        ("DECIMAL(10,2)", "DOUBLE", None, True),
        ("BIGINT", "INT", None, False),  # integers are carried 64 bits wide: stored as they are
        ("DOUBLE", "VARCHAR", None, False),
        ("DATE", "TIMESTAMP", None, False),
        ("TIMESTAMP", "TIMESTAMP(3)", None, False),
        ("INTEGER[]", "ARRAY<INT>", None, False),  # not checked
        ("BIGINT", "ARRAY<INT>", None, False),
        ("TIMESTAMP", "TIMESTAMP_LTZ(3)", None, False),
    ],
)
def test_what_a_store_can_lose(given: str, declared: str, lost, cast: bool) -> None:
    g, d = kind_of(given, "duckdb"), kind_of(declared)
    assert loss(g, d) == lost
    assert lost is not None or needs_cast(g, d) is cast


@pytest.mark.parametrize(
    ("select", "at", "hint"),
    [
        (
            "SELECT item, AVG(price) FROM Bid GROUP BY item",
            "AVG(price)",
            "CAST(AVG(price) AS BIGINT)",
        ),
        ("SELECT item, item FROM Bid", "item", "CAST(item AS BIGINT)"),
    ],
)
@pytest.mark.parametrize("sink", ["table", "changelog"])
def test_a_lossy_store_is_refused_before_running(bids, tmp_path, select, at, hint, sink) -> None:
    text = script(bids, "item VARCHAR, v BIGINT", select, f"'format' = '{sink}', 'path' = 'X'")
    text = text.replace("'X'", f"'{tmp_path / 'out'}'")
    with pytest.raises(SqlError) as info:
        list(run_script(text))
    error = info.value
    assert hint in str(error)
    line = text.splitlines()[error.line - 1]
    assert line[error.col - 1 :].startswith(at) and error.line == 3
    assert not glob.glob(str(tmp_path / "out*"))  # nothing written


def test_a_widening_store_is_cast_in_the_table_sink(bids, tmp_path) -> None:
    path = tmp_path / "s.duckdb"
    sink = f"'format' = 'table', 'path' = '{path}'"
    select = "SELECT item, SUM(price) AS total, COUNT(*) FROM Bid GROUP BY item"
    list(run_script(script(bids, "item VARCHAR, total DOUBLE, n BIGINT", select, sink)))
    with duckdb.connect(str(path)) as con:
        types = dict(con.sql("DESCRIBE S").df()[["column_name", "column_type"]].values)
        got = con.sql("SELECT item, total, n FROM S ORDER BY item").df()
    assert types["total"] == "DOUBLE"  # the SUM of BIGINTs, cast
    assert got.values.tolist() == [["a", 8.0, 2], ["b", 4.0, 1], ["c", 9.0, 1]]


def test_a_widening_store_is_cast_in_the_changelog_sink(bids, tmp_path) -> None:
    out = tmp_path / "log"
    sink = f"'format' = 'changelog', 'path' = '{out}'"
    select = "SELECT item, SUM(price) AS total FROM Bid GROUP BY item EMIT STREAM"
    list(run_script(script(bids, "item VARCHAR, total DOUBLE", select, sink)))
    log = pd.concat(
        pd.read_parquet(f) for f in sorted(glob.glob(f"{out}/**/*.parquet", recursive=True))
    )
    assert log["total"].dtype == "float64"
    final = log[~log["undo"].astype(bool)].groupby("item")["total"].last().to_dict()
    assert final == {"a": 8.0, "b": 4.0, "c": 9.0}


def test_the_explicit_cast_runs(bids, tmp_path) -> None:
    path = tmp_path / "s.duckdb"
    sink = f"'format' = 'table', 'path' = '{path}'"
    select = "SELECT item, CAST(AVG(price) AS BIGINT) AS v FROM Bid GROUP BY item"
    list(run_script(script(bids, "item VARCHAR, v BIGINT", select, sink)))
    with duckdb.connect(str(path)) as con:
        assert con.sql("SELECT item, v FROM S ORDER BY item").fetchall() == [
            ("a", 4),
            ("b", 4),
            ("c", 9),
        ]


@pytest.mark.spark
@pytest.mark.slow
def test_spark_casts_and_refuses_the_same(spark, bids, tmp_path) -> None:
    """On Spark (a replay source), the same refusal before running, and the same
    cast changelog into the same sink as locally."""
    refused = script(
        bids,
        "item VARCHAR, v BIGINT",
        "SELECT item, AVG(price) FROM Bid GROUP BY item",
        f"'format' = 'changelog', 'path' = '{tmp_path / 'x'}'",
    )
    with pytest.raises(SqlError, match=r"CAST\(AVG\(price\) AS BIGINT\)"):
        list(run_script(refused, runner="spark", checkpoint=str(tmp_path / "cp0")))
    select = "SELECT item, SUM(price) AS total FROM Bid GROUP BY item EMIT STREAM"
    logs = {}
    for runner in ("local", "spark"):
        out = tmp_path / runner
        text = script(
            bids, "item VARCHAR, total DOUBLE", select, f"'format' = 'changelog', 'path' = '{out}'"
        )
        list(run_script(text, runner=runner, checkpoint=str(tmp_path / f"cp-{runner}")))
        files = sorted(glob.glob(f"{out}/**/*.parquet", recursive=True))
        log = pd.concat(pd.read_parquet(f) for f in files)
        assert log["total"].dtype == "float64", runner
        logs[runner] = sorted(zip(log["item"], log["total"], log["undo"].astype(bool), strict=True))
    assert logs["spark"] == logs["local"]
