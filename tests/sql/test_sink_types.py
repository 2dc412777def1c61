"""INSERT INTO a sink of declared column types (issue 16): a result column is
cast to its sink column's type where the cast keeps every value (SQL's store
assignment: a SUM into a DOUBLE column, an integer into a DECIMAL wide enough);
a fraction into an integer column (NEXMark q4/q17's AVG, a DOUBLE, into a
BIGINT) is truncated toward zero, as Flink and Spark do (not rounded, as
DuckDB's CAST does); and the INSERT is refused before it runs, at the column,
with the CAST to write, where the cast can lose information otherwise (text
into a number, a timestamp into a DATE). The check runs before any sink is
touched, so every sink and both runners get the same types or the same refusal.
"""

from __future__ import annotations

import glob
from collections import Counter

import duckdb
import pandas as pd
import pytest
from sql_helpers import write_replay

from headwater.sql.errors import SqlError
from headwater.sql.execute.sink_types import fit_to_sink, kind_of, loss, needs_cast, truncates
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


#: A fraction into integer columns (v BIGINT, w INT, x BIGINT): AVG's DOUBLE
#: (-2.5 and a NULL), a DOUBLE times a DECIMAL, a DECIMAL (negative).
FRACTIONS = (
    "SELECT item, NULLIF(AVG(price), 9) - 6.5 AS v, AVG(price) * 1.9 AS w, "
    "SUM(price) * -0.3 AS x FROM Bid GROUP BY item"
)
#: Truncated toward zero (DuckDB's CAST would round: -3, 8, -3 for c's -2.7).
TRUNCATED = [("a", -2, 7, -2), ("b", -2, 7, -1), ("c", None, 17, -2)]


@pytest.mark.parametrize(
    ("given", "declared", "lost", "cast"),
    [
        ("DOUBLE", "BIGINT", None, True),  # truncated toward zero
        ("FLOAT", "INT", None, True),
        ("DECIMAL(10,2)", "INT", None, True),
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
    ("given", "declared", "truncated"),
    [
        ("DOUBLE", "BIGINT", True),
        ("FLOAT", "INT", True),
        ("DECIMAL(10,2)", "INT", True),
        ("BIGINT", "DOUBLE", False),
        ("DOUBLE", "DOUBLE", False),
        ("BOOLEAN", "INT", False),
        ("DECIMAL(10,2)", "DECIMAL(12,2)", False),
    ],
)
def test_a_fraction_into_an_integer_truncates(given: str, declared: str, truncated) -> None:
    assert truncates(kind_of(given, "duckdb"), kind_of(declared)) is truncated


@pytest.mark.parametrize(
    ("select", "at", "hint"),
    [
        (
            "SELECT item, MAX(bidtime) FROM Bid GROUP BY item",
            "MAX(bidtime)",
            "CAST(MAX(bidtime) AS BIGINT)",
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


def test_a_fraction_is_truncated_toward_zero(bids, tmp_path) -> None:
    path = tmp_path / "s.duckdb"
    sink = f"'format' = 'table', 'path' = '{path}'"
    list(run_script(script(bids, "item VARCHAR, v BIGINT, w INT, x BIGINT", FRACTIONS, sink)))
    with duckdb.connect(str(path)) as con:
        types = dict(con.sql("DESCRIBE S").df()[["column_name", "column_type"]].values)
        got = con.sql("SELECT item, v, w, x FROM S ORDER BY item").fetchall()
    assert (types["v"], types["w"], types["x"]) == ("BIGINT",) * 3  # integers: 64 bits wide
    assert got == TRUNCATED


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
    cast changelog into the same sink as locally: a widened SUM, and fractions
    truncated toward zero (Spark's CAST to BIGINT, DuckDB's TRUNC)."""
    refused = script(
        bids,
        "item VARCHAR, v BIGINT",
        "SELECT item, item FROM Bid",
        f"'format' = 'changelog', 'path' = '{tmp_path / 'x'}'",
    )
    with pytest.raises(SqlError, match=r"CAST\(item AS BIGINT\)"):
        list(run_script(refused, runner="spark", checkpoint=str(tmp_path / "cp0")))
    types_of = {  # a narrower INT column gets 64-bit integers, as any integer
        "sum": ["string[pyarrow]", "double[pyarrow]"],
        "trunc": ["string[pyarrow]", "int64[pyarrow]", "int64[pyarrow]", "int64[pyarrow]"],
    }
    cases = {
        "sum": (
            "item VARCHAR, total DOUBLE",
            "SELECT item, SUM(price) AS total FROM Bid GROUP BY item",
        ),
        "trunc": ("item VARCHAR, v BIGINT, w INT, x BIGINT", FRACTIONS),
    }
    for case, (columns, select) in cases.items():
        logs = {}
        for runner in ("local", "spark"):
            out = tmp_path / f"{case}-{runner}"
            text = script(
                bids, columns, f"{select} EMIT STREAM", f"'format' = 'changelog', 'path' = '{out}'"
            )
            list(run_script(text, runner=runner, checkpoint=str(tmp_path / f"cp-{case}-{runner}")))
            files = sorted(glob.glob(f"{out}/**/*.parquet", recursive=True))
            log = pd.concat(pd.read_parquet(f, dtype_backend="pyarrow") for f in files)
            names = [column.split()[0] for column in columns.split(", ")]
            types = [str(log[name].dtype) for name in names]
            assert types == types_of[case], (case, runner)
            rows = log[[*names, "undo"]].astype(object).where(log.notna(), None)
            logs[runner] = sorted(map(tuple, rows.values.tolist()), key=repr)
        assert logs["spark"] == logs["local"], case
    added = Counter(row[:-1] for row in logs["local"] if not row[-1])
    added.subtract(row[:-1] for row in logs["local"] if row[-1])
    assert sorted(added.elements(), key=repr) == sorted(TRUNCATED, key=repr)


def test_a_select_star_that_needs_a_cast_is_refused(bids, tmp_path) -> None:
    sink = f"'format' = 'table', 'path' = '{tmp_path / 's.duckdb'}'"
    select = "SELECT * FROM (SELECT item, AVG(price) AS v FROM Bid GROUP BY item) AS t"
    with pytest.raises(SqlError, match=r"S\.v is INT: a SELECT \*") as info:
        list(run_script(script(bids, "item VARCHAR, v INT", select, sink)))
    assert "CAST(... AS INT)" in str(info.value)


@pytest.mark.parametrize(
    "select",
    [
        "SELECT item, COUNT(*) FROM Bid GROUP BY item",  # an unnamed aggregate
        "SELECT item AS thing, MAX(price) + 0 * COUNT(*) - MAX(price) + COUNT(*) FROM Bid "
        "GROUP BY thing",  # a GROUP BY reading the query's own alias
        "SELECT * FROM (SELECT item AS i, COUNT(*) AS c FROM Bid GROUP BY item) AS t",
        "SELECT item, COUNT(*) AS c FROM Bid GROUP BY item ORDER BY c DESC, item LIMIT 9",
    ],
)
@pytest.mark.parametrize("fmt", ["table", "changelog"])
def test_the_rows_land_in_the_declared_columns_by_position(bids, tmp_path, select, fmt) -> None:
    """INSERT INTO fills the sink's columns by position (Flink's and Spark's meaning):
    the sink's columns are the declared ones, not the query's names."""
    out = tmp_path / ("s.duckdb" if fmt == "table" else "log")
    sink = f"'format' = '{fmt}', 'path' = '{out}'"
    list(run_script(script(bids, "name VARCHAR, n BIGINT", select, sink)))
    if fmt == "table":
        with duckdb.connect(str(out)) as con:
            columns = con.sql("DESCRIBE S").df()["column_name"].tolist()
            got = con.sql("SELECT name, n FROM S ORDER BY name").fetchall()
        assert [c for c in columns if not c.startswith("__")][:-1] == ["name", "n"]  # batch_id
    else:
        files = sorted(glob.glob(f"{out}/**/*.parquet", recursive=True))
        log = pd.concat(pd.read_parquet(f) for f in files)
        assert list(log.columns[:2]) == ["name", "n"]
        added = Counter(map(tuple, log[~log["undo"].astype(bool)][["name", "n"]].values.tolist()))
        added.subtract(map(tuple, log[log["undo"].astype(bool)][["name", "n"]].values.tolist()))
        got = sorted(added.elements())
    assert got == [("a", 2), ("b", 1), ("c", 1)]


def _fitted(select: str, declared: dict[str, str]) -> str:
    """The INSERT's query as :func:`fit_to_sink` gives it, over the test's Bid."""
    from headwater.sql.parse.dialect import parse_query

    query = parse_query(select)
    result = [
        (item.alias_or_name, "DOUBLE" if "AVG" in item.sql() else "BIGINT")
        for item in query.expressions
    ]
    result[0] = (result[0][0], "VARCHAR")
    return fit_to_sink(query, result, declared, "S").sql()


@pytest.mark.parametrize(
    ("select", "in_place"),
    [
        ("SELECT item, AVG(price) AS v FROM Bid GROUP BY item", True),
        ("SELECT item, AVG(price) AS v FROM Bid GROUP BY item HAVING v > 4", False),
        ("SELECT item, AVG(price) AS v FROM Bid GROUP BY item ORDER BY v", False),
        ("SELECT item, AVG(price) AS w FROM Bid GROUP BY item", False),  # renamed: w -> v
        ("SELECT item, AVG(price) OVER (PARTITION BY item) AS v FROM Bid", False),
    ],
)
def test_a_cast_aggregate_is_cast_in_its_own_item(select, in_place) -> None:
    """An aggregate cast to its sink column's type is cast where it is computed (the
    query keeps its shape: a windowed or keyed aggregate stays on the fast path);
    where a clause names it, a column is renamed or it is a window function, the
    cast is a SELECT over the query (``__sink``)."""
    fitted = _fitted(select, {"item": "VARCHAR", "v": "BIGINT"})
    assert ("__sink" not in fitted) == in_place, fitted
    if in_place:
        assert "CAST(TRUNC(AVG(price)) AS BIGINT) AS v" in fitted


def test_the_cast_in_its_item_changes_no_change_of_the_changelog(bids, tmp_path) -> None:
    """The changelog of an aggregate cast in its own item (the fast path) equals that
    of the same cast written as a SELECT over the query (the general path), every
    change with its ``undo`` and ``ver``."""
    inner = "SELECT item, AVG(price) * 1.9 AS v FROM Bid GROUP BY item"
    outer = f"SELECT item, CAST(TRUNC(v) AS BIGINT) AS v FROM ({inner}) AS q"
    logs = []
    for name, select in (("in-place", inner), ("outside", outer)):
        out = tmp_path / name
        sink = f"'format' = 'changelog', 'path' = '{out}'"
        list(run_script(script(bids, "item VARCHAR, v BIGINT", select + " EMIT STREAM", sink)))
        files = sorted(glob.glob(f"{out}/**/*.parquet", recursive=True))
        log = pd.concat(pd.read_parquet(f) for f in files)
        logs.append(sorted(map(tuple, log[["item", "v", "undo", "ver"]].values.tolist())))
    assert logs[0] == logs[1]
    assert len(logs[0]) > 3  # a retraction among them: item a changes
