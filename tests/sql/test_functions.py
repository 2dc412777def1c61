"""Python scalar functions in SQL (hw.sql(..., functions=...), CREATE FUNCTION ...
LANGUAGE PYTHON): vectorized, the same on every path and runner, their failures
named. The stream's final table equals the bounded query, and both equal the
same query written in plain SQL (DuckDB)."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, rows

import headwater as hw
from headwater.sql import sql
from headwater.sql.errors import SqlError
from headwater.sql.nexmark_udfs import count_char
from headwater.sql.plan.functions import FunctionError
from headwater.sql.script import run_script

#: count_char(s, 'c') in plain SQL.
_COUNT_C = "length(s) - length(replace(s, 'c', ''))"
WINDOWED = """SELECT wstart, wend, sum({f}) AS n, count(*) AS rows_
FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '10' SECOND)
GROUP BY wstart, wend"""
ROWWISE = "SELECT ts, s, {f} AS n FROM t WHERE {f} > 0"
QUERIES = {"windowed": WINDOWED, "rowwise": ROWWISE}


def events(n: int = 400, seed: int = 5) -> pd.DataFrame:
    """Strings of a, b, c (some NULL) over 40 s, arriving up to 3 s late."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abc"))
    s = ["".join(rng.choice(letters, rng.integers(0, 8))) for _ in range(n)]
    s = [None if i % 17 == 0 else v for i, v in enumerate(s)]
    ts = pd.to_datetime("2024-01-01") + pd.to_timedelta(rng.integers(0, 40_000, n), unit="ms")
    arrival = ts + pd.to_timedelta(rng.integers(0, 3_000, n), unit="ms")
    frame = pd.DataFrame({"ts": ts, "s": s, "arrival": arrival.floor("1s")})
    return frame.sort_values("arrival", kind="stable").reset_index(drop=True)


def stream(frame: pd.DataFrame):
    return hw.from_pandas(frame, event_time="ts", arrival_time="arrival", watermark="perfect")


def plain_sql(query: str, frame: pd.DataFrame) -> list[tuple]:
    with duckdb.connect() as con:
        con.register("t", frame.drop(columns=["arrival"]))
        text = query.format(f=_COUNT_C)
        text = text.replace(
            "FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '10' SECOND)",
            "FROM (SELECT *, time_bucket(INTERVAL 10 SECOND, ts) AS wstart, "
            "time_bucket(INTERVAL 10 SECOND, ts) + INTERVAL 10 SECOND AS wend FROM t)",
        )
        return rows(con.execute(text).df())


@pytest.mark.parametrize("shape", list(QUERIES))
def test_stream_equals_bounded_and_plain_sql(shape):
    frame = events()
    query = QUERIES[shape].format(f="count_char(s, 'c')")
    streamed = sql(query, {"t": stream(frame)}, functions=[count_char]).to_pandas()
    bounded = sql(query, {"t": frame.drop(columns=["arrival"])}, functions=[count_char])
    expected = plain_sql(QUERIES[shape], frame)
    assert len(expected) > 3
    assert_same_rows(rows(streamed), expected, ordered=False, what=f"{shape} stream")
    assert_same_rows(rows(bounded.to_pandas()), expected, ordered=False, what=f"{shape} bounded")


def test_windowed_call_runs_on_the_general_path():
    query = WINDOWED.format(f="count_char(s, 'c')")
    plan = sql(query, {"t": stream(events(20))}, functions=[count_char])
    assert "not the fast path because it calls user functions" in plan.explain()


def test_rowwise_call_runs_stateless_on_the_local_runner_as_the_stepped_path():
    """A query of rows on their own that calls a Python function takes the local
    runner's stateless path (one DuckDB query over every row on time, the function
    called batched in it), with the changelog and dead letters the model's path gives
    step by step (``fast_path=False``) at every processing time; on Spark streams
    it takes the stateless path too (the function a ``pandas_udf`` there)."""
    frame = events()
    frame.loc[frame.index[-1], "ts"] = frame["ts"].min()  # late: a dead letter
    tables = {"t": hw.from_pandas(frame, event_time="ts", arrival_time="arrival", watermark="1s")}
    query = ROWWISE.format(f="count_char(s, 'c')")
    each = sql(query, tables, functions=[count_char])
    general = sql(query, tables, functions=[count_char], fast_path=False)
    evaluation = "general path evaluation: stateless, one DuckDB query over every row"
    assert evaluation in each.explain() and evaluation not in general.explain()
    assert "on Spark streams: stateless: Spark's own projection" in each.explain()
    assert len(each.dead_letters()) >= 1
    arrivals = frame["arrival"].astype("datetime64[ms]").astype("int64").unique()
    for as_of in (*arrivals[::7].tolist(), None):
        pd.testing.assert_frame_equal(each.changelog(as_of), general.changelog(as_of))
        pd.testing.assert_frame_equal(each.dead_letters(as_of), general.dead_letters(as_of))


def test_each_batch_is_one_call_of_series():
    calls = []

    @hw.sql.function("BIGINT", ["VARCHAR"])
    def size(text):
        calls.append((type(text), len(text)))
        return text.str.len().fillna(-1).astype("int64")

    frame = pd.DataFrame({"s": ["ab", None, "abcd"] * 100})
    out = sql("SELECT size(s) AS n FROM t", {"t": frame}, functions=[size]).to_pandas()
    assert sorted(out.n.tolist()) == sorted([2, -1, 4] * 100)
    assert calls and all(kind is pd.Series for kind, _ in calls)
    assert sum(n for _, n in calls) == 300 and len(calls) < 300


def test_functions_by_name_rename():
    frame = pd.DataFrame({"s": ["cc", "c"]})
    out = sql("SELECT cc(s, 'c') AS n FROM t", {"t": frame}, functions={"cc": count_char})
    assert sorted(out.to_pandas().n) == [1, 2]


def test_script_create_function_language_python(tmp_path):
    frame = pd.DataFrame({"s": ["abc", "ccc", None]})
    script = (
        "CREATE TEMPORARY FUNCTION count_char AS 'headwater.sql.nexmark_udfs.count_char' "
        "LANGUAGE PYTHON;\nSELECT s, count_char(s, 'c') AS n FROM t;"
    )
    (out,) = run_script(script, {"t": frame})
    assert out.n.tolist() == [1, 3, 0]


def test_a_java_function_is_refused_with_its_position():
    script = "SELECT 1 AS x FROM t;\nCREATE FUNCTION count_char AS 'com.x.CountChar';"
    with pytest.raises(SqlError) as info:
        list(run_script(script, {"t": pd.DataFrame({"a": [1]})}))
    assert (info.value.line, info.value.col) == (2, 31)
    assert "Python functions only" in str(info.value) and "LANGUAGE PYTHON" in info.value.hint


def test_an_unimportable_function_is_refused():
    script = "CREATE FUNCTION f AS 'headwater.no_such_module.f' LANGUAGE PYTHON;"
    with pytest.raises(SqlError, match="cannot import 'headwater.no_such_module.f'"):
        list(run_script(script))


def test_an_unknown_function_is_positioned():
    frame = pd.DataFrame({"s": ["a"]})
    with pytest.raises(SqlError) as info:
        sql("SELECT\n  count_chars(s, 'c') FROM t", {"t": frame}, functions=[count_char])
    assert "unknown function 'count_chars'" in str(info.value)
    assert (info.value.line, info.value.col) == (2, 3)


def test_a_name_sql_has_is_refused():
    # SQL's own UPPER would run, silently, instead of the Python function
    with pytest.raises(SqlError, match="'upper': SQL has a function of that name"):
        sql("SELECT upper(s) FROM t", {"t": pd.DataFrame({"s": ["a"]})}, functions={"upper": words})


def test_declared_types_are_checked():
    frame = pd.DataFrame({"s": ["a"]})
    odd = hw.sql.function("NUMBERISH", ["VARCHAR"])(lambda s: s)
    with pytest.raises(SqlError, match="result type 'NUMBERISH' is not a SQL type"):
        sql("SELECT f(s) FROM t", {"t": frame}, functions={"f": odd})
    nullary = hw.sql.function("BIGINT", [])(lambda: 1)
    with pytest.raises(SqlError, match="'f' takes no arguments"):
        sql("SELECT f() FROM t", {"t": frame}, functions={"f": nullary})


def test_a_plain_callable_is_refused():
    with pytest.raises(SqlError, match="not a ScalarFunction"):
        sql("SELECT f(s) FROM t", {"t": pd.DataFrame({"s": ["a"]})}, functions={"f": len})


@hw.sql.function("BIGINT", ["VARCHAR"])
def raises(text):
    raise ValueError("no such character")


@hw.sql.function("BIGINT", ["VARCHAR"])
def too_short(text):
    return text.iloc[:0].str.len()  # none, whatever the batch (Spark splits the rows)


@hw.sql.function("BIGINT", ["VARCHAR"])
def words(text):
    return text  # strings where BIGINTs are declared


FAILURES = {
    raises: "function 'raises' raised ValueError: no such character",
    too_short: "function 'too_short' returned 0 values for ",
    words: "function 'words' returned values that are not BIGINT",
}


@pytest.mark.parametrize("fn", list(FAILURES), ids=[f.name for f in FAILURES])
@pytest.mark.parametrize("kind", ["bounded", "stream"])
def test_a_failing_function_fails_the_query_naming_it(fn, kind):
    frame = pd.DataFrame(
        {
            "ts": pd.to_datetime(["2024-01-01 00:00:01"] * 3),
            "s": ["a", "bb", "x"],
            "arrival": pd.to_datetime(["2024-01-01 00:00:02"] * 3),
        }
    )
    table = stream(frame) if kind == "stream" else frame
    query = sql(f"SELECT {fn.name}(s) AS n FROM t", {"t": table}, functions=[fn])
    with pytest.raises(FunctionError) as info:
        query.to_pandas()
    assert FAILURES[fn] in str(info.value)


# ------------------------------------------------------------------ Spark


@pytest.mark.spark
@pytest.mark.parametrize("shape", list(QUERIES))
def test_spark_equals_the_local_runner(spark, shape):
    """Spark SQL calls the function as a pandas_udf (the bounded query), the
    stream's per-shard DuckDB state as an Arrow function: both equal plain SQL."""
    from headwater.sql.execute.spark import SparkSqlQuery

    frame = events(120)
    query = QUERIES[shape].format(f="count_char(s, 'c')")
    expected = plain_sql(QUERIES[shape], frame)
    bounded = SparkSqlQuery(query, {"t": frame.drop(columns=["arrival"])}, "b", [count_char], spark)
    assert_same_rows(rows(bounded.to_pandas()), expected, ordered=False, what=f"{shape} bounded")
    streamed = SparkSqlQuery(query, {"t": stream(frame)}, "s", [count_char], spark)
    assert_same_rows(rows(streamed.to_pandas()), expected, ordered=False, what=f"{shape} stream")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("fn", "kind"),
    [(raises, "stream"), (raises, "bounded"), (too_short, "bounded"), (words, "bounded")],
    ids=["raises-stream", "raises-bounded", "too_short-bounded", "words-bounded"],
)
def test_spark_a_failing_function_fails_the_query_naming_it(spark, fn, kind):
    from headwater.sql.execute.spark import SparkSqlQuery

    frame = pd.DataFrame(
        {
            "ts": pd.to_datetime(["2024-01-01 00:00:01"] * 3),
            "s": ["a", "bb", "x"],
            "arrival": pd.to_datetime(["2024-01-01 00:00:02"] * 3),
        }
    )
    table = stream(frame) if kind == "stream" else frame.drop(columns=["arrival"])
    query = SparkSqlQuery(f"SELECT {fn.name}(s) AS n FROM t", {"t": table}, "q", [fn], spark)
    with pytest.raises(FunctionError) as info:
        query.to_pandas()
    assert FAILURES[fn] in str(info.value)


# ------------------------------------------------------------------ command line


def test_cli_function_flag(capsys, tmp_path):
    from headwater.cli import main

    frame = pd.DataFrame({"s": ["abc", "cc"]})
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    script = tmp_path / "q.sql"
    script.write_text(
        f"CREATE TABLE t (s VARCHAR) WITH ('format' = 'csv', 'path' = '{path}');\n"
        "SELECT s, cc(s, 'c') AS n FROM t;"
    )
    argv = ["sql", "-f", str(script), "--format", "csv"]
    assert main([*argv, "--function", "cc=headwater.sql.nexmark_udfs.count_char"]) == 0
    assert capsys.readouterr().out.splitlines() == ["s,n", "abc,1", "cc,2"]
    assert main([*argv, "--function", "cc=headwater.sql.nexmark_udfs.nothing"]) == 2
    assert "--function cc: cannot import 'headwater.sql.nexmark_udfs.nothing'" in (
        capsys.readouterr().err
    )
