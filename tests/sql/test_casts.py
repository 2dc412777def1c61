"""An explicit CAST of a fraction to an integer type truncates toward zero on
every runner (headwater/sql/plan/casts.py): DuckDB alone would round 2.7 to 3,
Spark truncates it to 2."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.sql import SqlError
from headwater.sql.parse.dialect import parse_query
from headwater.sql.plan.casts import truncating_casts

T0 = pd.Timestamp("2026-01-01 12:00:00")
X = [2.5, 2.7, -2.7, -0.5, None, 7.9]

#: A DOUBLE, a DECIMAL and an integer column; rows one second apart.
ROWS = pd.DataFrame(
    {
        "k": ["a", "b", "c", "d", "e", "f"],
        "ts": [T0 + pd.Timedelta(seconds=i) for i in range(len(X))],
        "x": X,
        "d": [
            Decimal("2.75"),
            Decimal("-2.75"),
            Decimal("0.50"),
            Decimal("-0.50"),
            None,
            Decimal("9.99"),
        ],
        "n": pd.array([1, 2, 3, 4, None, 6], dtype="Int64"),
    }
)

CASTS = """
SELECT k, CAST(x AS BIGINT) AS b, CAST(x AS INT) AS i, CAST(x AS SMALLINT) AS s,
  CAST(x AS TINYINT) AS t, CAST(d AS BIGINT) AS db, CAST(x / 2 AS BIGINT) AS half,
  CAST(n AS INT) AS ni, CAST(y AS BIGINT) AS inner_y
FROM (SELECT *, x * 3 AS y FROM t) AS r
"""


def truncated(values) -> list:
    """The values truncated toward zero (NULL stays NULL), as Spark and Flink cast."""
    return [None if v is None or pd.isna(v) else int(np.trunc(float(v))) for v in values]


def expected() -> pd.DataFrame:
    x = ROWS["x"]
    return pd.DataFrame(
        {
            "k": ROWS["k"],
            "b": truncated(x),
            "i": truncated(x),
            "s": truncated(x),
            "t": truncated(x),
            "db": truncated(ROWS["d"]),
            "half": truncated(x / 2),
            "ni": truncated(ROWS["n"]),
            "inner_y": truncated(x * 3),
        }
    )


def as_rows(frame: pd.DataFrame, columns=None) -> list[tuple]:
    frame = frame[list(columns if columns is not None else expected().columns)].astype(object)
    rows = [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]
    return sorted(rows, key=repr)


def test_the_expected_values_are_truncations_not_roundings() -> None:
    """The check can fail: DuckDB's own cast rounds 2.7 to 3 and -0.5 to -1."""
    assert truncated([2.5, 2.7, -2.7, -0.5, None]) == [2, 2, -2, 0, None]
    import duckdb

    assert duckdb.sql("SELECT CAST(2.7 AS BIGINT), CAST(-0.5 AS INT)").fetchone() == (3, -1)


def replay(rows: pd.DataFrame = ROWS) -> object:
    arrival = rows["ts"] + pd.Timedelta(milliseconds=10)
    return hw.from_pandas(rows.assign(arrival=arrival), "ts", arrival_time="arrival")


@pytest.mark.parametrize("source", ["bounded", "stream"])
def test_local_runner_truncates(source: str) -> None:
    table = ROWS if source == "bounded" else replay()
    text = CASTS if source == "bounded" else CASTS + " EMIT STREAM"
    got = hw.sql(text, {"t": table}).to_pandas()
    assert as_rows(got) == as_rows(expected())


@pytest.mark.spark
@pytest.mark.parametrize("source", ["bounded", "stream"])
def test_spark_truncates_as_the_local_runner(spark, source: str) -> None:
    """On a Spark replay too: its timeline is JSON, which keeps a DECIMAL as text."""
    table = spark.createDataFrame(ROWS) if source == "bounded" else replay()
    text = CASTS if source == "bounded" else CASTS + " EMIT STREAM"
    got = hw.sql(text, {"t": table}, runner="spark").to_pandas()
    assert as_rows(got) == as_rows(expected())


WINDOWED = """
SELECT wstart, CAST(AVG(x) AS BIGINT) AS a, CAST(SUM(d) AS INT) AS s, COUNT(*) AS c
FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '1' MINUTE)
GROUP BY wstart, wend
"""


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_cast_of_an_aggregate_truncates_on_both_streaming_paths(fast_path: bool) -> None:
    query = hw.sql(WINDOWED, {"t": replay()}, fast_path=fast_path)
    assert ("runs on: fast path" in query.explain()) == fast_path
    (row,) = query.to_pandas().itertuples(index=False)
    mean = ROWS["x"].mean()  # 1.98: AVG skips the NULL; DuckDB's cast would give 2
    total = sum(d for d in ROWS["d"] if d is not None)
    assert (row.a, row.s, row.c) == (int(np.trunc(mean)), int(total), len(ROWS))
    assert (row.a, row.s) == tuple(hw.sql(WINDOWED, {"t": ROWS}).to_pandas().iloc[0][["a", "s"]])


def test_only_casts_of_fractions_and_text_to_integers_change() -> None:
    text = (
        "SELECT CAST(x AS BIGINT) AS a, CAST(n AS BIGINT) AS b, CAST(k AS BIGINT) AS c, "
        "CAST(x AS VARCHAR) AS e, TRY_CAST(x AS INT) AS f FROM t"
    )
    from headwater.sql.plan.catalog import Table

    written = truncating_casts(parse_query(text), [Table("t", frame=ROWS)]).sql()
    assert "CAST(TRUNC(x) AS BIGINT) AS a" in written
    assert "CAST(n AS BIGINT) AS b" in written
    assert "REGEXP_LIKE(TRIM(k), '^[+-]?[0-9]+$') THEN TRIM(k)" in written  # text: see below
    assert "CAST(x AS VARCHAR) AS e" in written and "TRY_CAST(TRUNC(x) AS INT) AS f" in written


#: Text into an integer: only an integer's digits (around blanks) are one, as on
#: Spark (ANSI) and Flink; DuckDB alone reads '1.5' as 2, '1e2' as 100, '0x10' as 16.
TEXTS = pd.DataFrame(
    {
        "k": list("abcdefgh"),
        "ts": [T0 + pd.Timedelta(seconds=i) for i in range(8)],
        "s": [" 12 ", "+7", "-3", "1.5", "1e2", "0x10", "abc", None],
    }
)
TEXT_CASTS = "SELECT k, TRY_CAST(s AS INT) AS i, TRY_CAST(s AS BIGINT) AS b FROM t"
TEXT_EXPECTED = [("a", 12, 12), ("b", 7, 7), ("c", -3, -3)] + [(k, None, None) for k in "defgh"]


def test_duckdb_alone_reads_more_text_as_integers() -> None:
    """The check can fail: DuckDB's own TRY_CAST reads these."""
    import duckdb

    got = duckdb.sql(
        "SELECT TRY_CAST('1.5' AS INT), TRY_CAST('1e2' AS INT), TRY_CAST('0x10' AS INT)"
    )
    assert got.fetchone() == (2, 100, 16)


@pytest.mark.parametrize("source", ["bounded", "stream"])
def test_text_into_an_integer_takes_only_digits(source: str) -> None:
    table = TEXTS if source == "bounded" else replay(TEXTS)
    text = TEXT_CASTS if source == "bounded" else TEXT_CASTS + " EMIT STREAM"
    got = hw.sql(text, {"t": table}).to_pandas()
    assert as_rows(got, ["k", "i", "b"]) == sorted(TEXT_EXPECTED, key=repr)


@pytest.mark.parametrize("value", ["1.5", "1e2", "0x10", "abc"])
def test_a_cast_of_other_text_fails_naming_the_value(value: str) -> None:
    rows = TEXTS.assign(s=["1", value, *["2"] * 6])
    with pytest.raises(SqlError, match=f"not an integer: {value}"):
        hw.sql("SELECT k, CAST(s AS INT) AS i FROM t", {"t": rows}).to_pandas()
    assert hw.sql("SELECT CAST(s AS INT) AS i FROM t", {"t": TEXTS.head(3)}).to_pandas()[
        "i"
    ].tolist() == [12, 7, -3]


@pytest.mark.spark
def test_spark_reads_text_as_the_local_runner(spark) -> None:
    got = hw.sql(TEXT_CASTS + " EMIT STREAM", {"t": replay(TEXTS)}, runner="spark").to_pandas()
    assert as_rows(got, ["k", "i", "b"]) == sorted(TEXT_EXPECTED, key=repr)
    bounded = hw.sql(TEXT_CASTS, {"t": spark.createDataFrame(TEXTS)}, runner="spark").to_pandas()
    assert as_rows(bounded, ["k", "i", "b"]) == sorted(TEXT_EXPECTED, key=repr)


def test_planning_a_stage_again_does_not_wrap_twice() -> None:
    from headwater.sql.plan.catalog import Table

    tables = [Table("t", frame=TEXTS)]
    once = truncating_casts(parse_query(TEXT_CASTS), tables)
    assert truncating_casts(once, tables).sql() == once.sql()
    assert once.sql().count("REGEXP_LIKE") == 2


#: Operands whose type the planner derives through the query (not a column of
#: the table): text ('  12 ', '1.5', 'x', NULL), an integer and a fraction each.
HIDDEN = pd.DataFrame(
    {
        "k": list("abcd"),
        "ts": [T0 + pd.Timedelta(seconds=i) for i in range(4)],
        "s": ["  12 ", "1.5", "x", None],
        "n": pd.array([12, -3, 7, None], dtype="Int64"),
        "x": [2.7, -2.7, 0.5, None],
    }
)
#: Another table with a column ``s`` of another type (a name alone is ambiguous).
OTHER = pd.DataFrame({"k": list("abcd"), "s": [1, 2, 3, 4]})
#: query -> its operands' ``{c}``: ``{c}`` stands for ``s``, ``n`` or ``x``.
HIDDEN_FORMS = {
    "subquery": "SELECT k, TRY_CAST(v AS INT) AS i FROM (SELECT k, {c} AS v FROM t) AS r",
    "cte": "WITH w AS (SELECT k, {c} AS v FROM t) SELECT k, TRY_CAST(v AS INT) AS i FROM w",
    "union": "SELECT k, TRY_CAST(v AS INT) AS i FROM (SELECT k, {c} AS v FROM t WHERE k < 'c' "
    "UNION ALL SELECT k, {c} AS v FROM t WHERE k >= 'c') AS r",
    "case": "SELECT k, TRY_CAST(CASE WHEN k <> 'z' THEN {c} END AS INT) AS i FROM t",
    "coalesce": "SELECT k, TRY_CAST(COALESCE({c}, NULL) AS INT) AS i FROM t",
    "nullif": "SELECT k, TRY_CAST(NULLIF({c}, {c} + 1) AS INT) AS i FROM t",
    "qualified": "SELECT t.k, TRY_CAST(t.{c} AS INT) AS i FROM t JOIN u ON t.k = u.k",
    # unqualified, where one table in scope has it (u, of another type, is read
    # only inside the subquery)
    "scoped": "SELECT t.k, TRY_CAST({c} AS INT) AS i FROM t JOIN (SELECT k AS j FROM u) AS z "
    "ON t.k = z.j",
    # a subquery's column, named as u's integer s, read through its alias
    "through alias": "SELECT r.k, TRY_CAST(r.s AS INT) AS i FROM (SELECT k, {c} AS s FROM t) "
    "AS r JOIN u ON r.k = u.k",
    # the same column read from a correlated subquery (its outer scope's source)
    "correlated": "SELECT r.k, (SELECT TRY_CAST(r.s AS INT) FROM u WHERE u.k = r.k) AS i "
    "FROM (SELECT k, {c} AS s FROM t) AS r",
}
#: Functions of text sqlglot leaves untyped: the planner knows they give text.
TEXT_FORMS = {
    "replace": "SELECT k, TRY_CAST(REPLACE(s, 'q', '') AS INT) AS i FROM t",
    "split_part": "SELECT k, TRY_CAST(SPLIT_PART(s, ',', 1) AS INT) AS i FROM t",
    "regexp_replace": "SELECT k, TRY_CAST(REGEXP_REPLACE(s, 'q', '') AS INT) AS i FROM t",
}


def hidden_queries() -> dict[str, str]:
    """Each form over each operand (``nullif`` of text: ``s || ''``)."""
    out = {f"{name} of {c}": form.format(c=c) for name, form in HIDDEN_FORMS.items() for c in "nx"}
    out |= {
        f"{n} of s": f.format(c="s").replace("s + 1", "s || 'q'") for n, f in HIDDEN_FORMS.items()
    }
    return out | {f"{name} of s": form for name, form in TEXT_FORMS.items()}


def bounded_reference(text: str) -> list[tuple]:
    """The query in DuckDB over the same rows with Spark's meaning of TRY_CAST to
    INT spelled out: only an integer's digits (around blanks) for text, a
    fraction truncated toward zero, an integer as it is."""
    import duckdb

    with duckdb.connect() as con:
        con.register("t", HIDDEN)
        con.register("u", OTHER)
        con.execute(
            "CREATE MACRO spark_int(v) AS CASE WHEN typeof(v) = 'VARCHAR' THEN "
            "(CASE WHEN regexp_full_match(trim(v::VARCHAR), '[+-]?[0-9]+') "
            "THEN CAST(trim(v::VARCHAR) AS INT) END) "
            "ELSE TRY_CAST(trunc(TRY_CAST(v AS DOUBLE)) AS INT) END"
        )
        spelled = text.replace("TRY_CAST(", "spark_int(").replace(" AS INT)", ")")
        return as_rows(con.sql(spelled).df(), ["k", "i"])


def test_the_bounded_reference_differs_from_duckdbs_own_cast() -> None:
    """The check can fail: DuckDB's TRY_CAST reads '1.5' as 2 and rounds -2.7 to -3."""
    import duckdb

    text = hidden_queries()["subquery of s"]
    with duckdb.connect() as con:
        con.register("t", HIDDEN)
        own = as_rows(con.sql(text).df(), ["k", "i"])
    assert own != bounded_reference(text)
    assert bounded_reference(text) == [("a", 12), ("b", None), ("c", None), ("d", None)]


@pytest.mark.parametrize("source", ["bounded", "stream"])
@pytest.mark.parametrize("name", sorted(hidden_queries()))
def test_a_cast_of_an_operand_typed_through_the_query(name: str, source: str) -> None:
    text = hidden_queries()[name]
    table = HIDDEN if source == "bounded" else replay(HIDDEN)
    query = text if source == "bounded" else text + " EMIT STREAM"
    got = hw.sql(query, {"t": table, "u": OTHER}).to_pandas()
    assert as_rows(got, ["k", "i"]) == bounded_reference(text), name


@pytest.mark.spark
@pytest.mark.parametrize(
    "name", ["union of s", "case of x", "qualified of s", "scoped of s", "replace of s"]
)
def test_spark_replay_casts_an_operand_typed_through_the_query(spark, name: str) -> None:
    text = hidden_queries()[name]
    tables = {"t": replay(HIDDEN), "u": spark.createDataFrame(OTHER)}
    got = hw.sql(text + " EMIT STREAM", tables, runner="spark").to_pandas()
    assert as_rows(got, ["k", "i"]) == bounded_reference(text), name


#: An operand whose type stays unknown and may be text: a function sqlglot
#: cannot type, with the inner cast the hint names, and a query of the same
#: meaning (no value holds a comma: SPLIT(s, ',')[0] is s) for the bounded
#: reference. (A column is typed by the one source in scope that has it:
#: HIDDEN_FORMS' "scoped".)
UNTOLD = {
    "SELECT k, TRY_CAST(SPLIT(s, ',')[0] AS INT) AS i FROM t": (
        "SPLIT(s, ',')[0]",
        "TRY_CAST(CAST(SPLIT(s, ',')[0] AS VARCHAR) AS INT)",
        "SELECT k, TRY_CAST(s AS INT) AS i FROM t",
    ),
}


@pytest.mark.parametrize("text", list(UNTOLD))
def test_a_cast_of_an_operand_of_untold_type_is_refused(text: str) -> None:
    operand, hinted, same = UNTOLD[text]
    tables = {"t": HIDDEN, "u": OTHER}
    with pytest.raises(SqlError, match="cannot tell whether") as refused:
        hw.sql(text, tables).to_pandas()
    assert (refused.value.line, refused.value.col) == (1, text.index("TRY_CAST") + 10)
    assert operand in str(refused.value) and hinted in refused.value.hint
    fixed = text.replace(f"TRY_CAST({operand} AS INT)", hinted)
    got = hw.sql(fixed, tables).to_pandas()
    assert as_rows(got, ["k", "i"]) == bounded_reference(same)


@pytest.mark.parametrize(
    "name", ["subquery of s", "union of s", "qualified of s", "scoped of s", "replace of s"]
)
def test_a_cast_of_text_typed_through_the_query_fails_naming_the_value(name: str) -> None:
    text = hidden_queries()[name].replace("TRY_CAST(", "CAST(")
    with pytest.raises(SqlError, match="not an integer: 1.5"):
        hw.sql(text, {"t": HIDDEN, "u": OTHER}).to_pandas()
    digits = HIDDEN.assign(s=["  12 ", "+7", "-3", None])
    got = hw.sql(text, {"t": digits, "u": OTHER}).to_pandas()
    expected = [None if v is None else int(v) for v in digits["s"]]  # Python reads digits only
    assert as_rows(got, ["k", "i"]) == sorted(zip(digits["k"], expected, strict=True), key=repr)


def test_a_column_is_typed_by_the_innermost_scope_that_has_it() -> None:
    """Inside the subquery, ``s`` is u's integer (t's text ``s`` is only outside);
    a cast there stays DuckDB's integer cast, unwrapped."""
    from headwater.sql.plan.catalog import Table

    tables = [Table("t", frame=HIDDEN), Table("u", frame=OTHER)]
    inner = "SELECT t.k FROM t JOIN (SELECT k AS j, CAST(s AS INT) AS si FROM u) AS z ON t.k = z.j"
    assert "REGEXP_LIKE" not in truncating_casts(parse_query(inner), tables).sql()
    outer = inner.replace("t.k FROM", "t.k, CAST(s AS INT) FROM")
    assert truncating_casts(parse_query(outer), tables).sql().count("REGEXP_LIKE") == 1


#: A CSV file whose declared text columns hold digits, a fraction and blanks.
CSV_ROWS = "k,s,d,n\na,  12 ,2.7,7\nb,1.5,-2.7,08\nc,x,0.5,\nd,,,3\n"
CSV_QUERY = (
    "SELECT k, TRY_CAST(s AS INT) AS si, CAST(d AS INT) AS di, TRY_CAST(n AS INT) AS ni, n FROM t"
)


@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_csv_sources_declared_types_decide_its_casts(request, tmp_path, runner: str) -> None:
    """A ``'format' = 'csv'`` table is typed by its DDL, not by what its text
    looks like: ``n`` (VARCHAR, '08') stays text and casts as Spark's, ``d``
    (DOUBLE) truncates, on both runners."""
    from headwater.sql.script import run_script

    if runner == "spark":
        request.getfixturevalue("spark")
    path = tmp_path / "t.csv"
    path.write_text(CSV_ROWS)
    ddl = (
        "CREATE TABLE t (k VARCHAR, s VARCHAR, d DOUBLE, n VARCHAR) "
        f"WITH ('format' = 'csv', 'path' = '{path}');\n"
    )
    (got,) = run_script(ddl + CSV_QUERY + ";", runner=runner)
    columns = ["k", "si", "di", "ni", "n"]
    assert as_rows(got, columns) == sorted(
        [("a", 12, 2, 7, "7"), ("b", None, -2, 8, "08"), ("c", None, 0, None, None)]
        + [("d", None, None, 3, "3")],
        key=repr,
    )
