"""A query or a configuration that makes no sense fails before anything runs, in the
user's words: a SQL error names the user's column, function or option at its line
and column (never an internal column such as ``__et`` or a parser's internals); a
fluent pipeline's names the argument. Result types follow SQL on every path.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import headwater as hw
from headwater.model.plan import PlanError
from headwater.sql import read_replay, sql
from headwater.sql.cli import main
from headwater.sql.errors import SqlError
from headwater.sql.parse.dialect import parse, source_def

TUMBLE = "Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE)"
#: (ptime, rows (bidtime, price, score, item), watermark) on 2024-01-01
STEPS = [
    ("10:01", [("10:00", 3, 0.5, "A"), ("10:02", 5, 1.5, "B")], None),
    ("10:04", [("10:03", 7, 2.0, "A")], "10:02"),
    ("10:12", [], "10:11"),
]
INTERNAL = ("__et", "__src", "__key", "__gk", "__gs", "__ge", "__t0", "__ptime")


def _iso(clock: str) -> str:
    return f"2024-01-01T{clock}:00"


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> dict:
    lines = []
    for ptime, rows, watermark in STEPS:
        for bidtime, price, score, item in rows:
            row = {"bidtime": _iso(bidtime), "price": price, "score": score, "item": item}
            lines.append({"ptime": _iso(ptime), "row": row})
        if watermark:
            lines.append({"ptime": _iso(ptime), "watermark": _iso(watermark)})
    path = tmp_path_factory.mktemp("bad-sql") / "bid.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return {"Bid": read_replay(str(path), "Bid", "bidtime")}


@pytest.fixture(scope="module")
def table(stream) -> dict:
    return {"Bid": stream["Bid"].frame.drop(columns="__ptime")}


def at(text: str, fragment: str, nth: int = 0) -> tuple[int, int]:
    """(line, col), 1-based, of the ``nth`` occurrence of ``fragment`` in ``text``."""
    index = -1
    for _ in range(nth + 1):
        index = text.index(fragment, index + 1)
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def sql_error(text: str, tables: dict) -> SqlError:
    with pytest.raises(SqlError) as info:
        sql(text, tables).to_pandas()
    return info.value


def assert_user_words(err: SqlError, position: tuple[int, int], *words: str) -> None:
    """At ``position``, saying ``words``, and no internal name of headwater."""
    rendered = str(err)
    assert (err.line, err.col) == position, rendered
    assert rendered.startswith(f"line {err.line}, column {err.col}: "), rendered
    for word in words:
        assert word in rendered, rendered
    for internal in INTERNAL:
        assert internal not in rendered, rendered


# ------------------------------------------------------------------ argument types

#: A call whose argument has a type the function does not take:
#: (query, where the call starts, the function, the column, its type, a cast it suggests)
ARGUMENT_TYPES = {
    "sum of a string": ("SELECT item,\n  sum(item) AS s\nFROM Bid\nGROUP BY item",
                        "sum(", "SUM", "'item'", "VARCHAR", "CAST(item AS DOUBLE)"),
    "epoch_ms of a string": ("SELECT epoch_ms(item) AS t\nFROM Bid",
                             "epoch_ms", "epoch_ms", "'item'", "VARCHAR", "AS TIMESTAMP"),
    "length of a number": ("SELECT item\nFROM Bid\nWHERE length(price) > 1",
                           "length", "LENGTH", "'price'", "BIGINT", "CAST(price AS VARCHAR)"),
    "windowed sum": (f"SELECT wstart,\n  SUM(item) AS s\nFROM {TUMBLE}\nGROUP BY wstart",
                     "SUM", "SUM", "'item'", "VARCHAR", "CAST(item AS DOUBLE)"),
}  # fmt: skip


@pytest.mark.parametrize("case", ARGUMENT_TYPES)
@pytest.mark.parametrize("kind", ["stream", "table"])
def test_a_call_with_an_argument_of_the_wrong_type(request, kind: str, case: str) -> None:
    text, call, function, column, kind_of, cast = ARGUMENT_TYPES[case]
    if kind == "stream" and case == "sum of a string":
        text = text.replace("GROUP BY item", "GROUP BY item, bidtime")
    err = sql_error(text, request.getfixturevalue(kind))
    assert_user_words(err, at(text, call), function, column, kind_of, cast)
    assert "Binder Error" not in str(err) and "explicit type casts" not in str(err)


# ------------------------------------------------------------------ names

#: A bare name that is no column: never a keyword or function's value ('duckdb').
UNKNOWN_NAMES = {
    "user in SELECT": ("SELECT user\nFROM Bid", "user"),
    "user in WHERE": ("SELECT item\nFROM Bid\nWHERE user = 'duckdb'", "user"),
    "current_role": ("SELECT item, current_role\nFROM Bid", "current_role"),
    "windowed": (f"SELECT wstart, user, COUNT(*) AS n\nFROM {TUMBLE}\nGROUP BY wstart, user",
                 "user"),
}  # fmt: skip


@pytest.mark.parametrize("case", UNKNOWN_NAMES)
@pytest.mark.parametrize("kind", ["stream", "table"])
def test_a_keyword_is_never_taken_for_a_column(request, kind: str, case: str) -> None:
    text, name = UNKNOWN_NAMES[case]
    err = sql_error(text, request.getfixturevalue(kind))
    assert_user_words(err, at(text, name), f"unknown column {name!r}", "bidtime, price")


def test_names_the_query_defines_are_columns(table) -> None:
    """The check knows aliases, table-alias column lists and window columns."""
    queries = [
        "SELECT price AS p FROM Bid ORDER BY p",
        "SELECT t.x FROM (SELECT price FROM Bid) AS t(x)",
        "WITH c(x) AS (SELECT price FROM Bid) SELECT x FROM c",
        f"SELECT wstart, COUNT(*) AS n FROM {TUMBLE} GROUP BY wstart",
        "SELECT list_transform([price], v -> v + 1) AS l FROM Bid",
    ]
    for text in queries:
        assert len(sql(text, table).to_pandas()) >= 1, text


# ------------------------------------------------------------------ syntax

#: A syntax error in plain words: (query, where, words, what must not show)
SYNTAX = {
    "comparison without its right side": ("SELECT item\nFROM Bid\nWHERE price >", ">",
                                          "> must be followed by an expression", "GT"),
    "operator followed by a keyword": ("SELECT item\nFROM Bid\nWHERE price = AND item = 'A'",
                                       "AND", "= must be followed by an expression, not by 'AND'",
                                       "EQ"),
    "one parenthesis too many": ("SELECT item\nFROM Bid)", ")", "unexpected ')'",
                                 "Unexpected token"),
    "FROM without a table": ("SELECT item\nFROM", "FROM", "expected table name after 'FROM'",
                             "<Token"),
    "two > apart (not a shift)": ("SELECT item\nFROM Bid\nWHERE price > > 3", "> 3",
                                  "'> >' is not an operator", ">>"),
    "unclosed parenthesis": ("SELECT (item\nFROM Bid", "FROM", "expected ')' before 'FROM'",
                             "Expecting"),
}  # fmt: skip


@pytest.mark.parametrize("case", SYNTAX)
def test_a_syntax_error_in_plain_words(table, case: str) -> None:
    text, fragment, words, internal = SYNTAX[case]
    err = sql_error(text, table)
    assert_user_words(err, at(text, fragment), words)
    assert internal not in err.message and "incomplete" not in str(err)


# ------------------------------------------------------------------ windows and options


#: A windowing TVF or EMIT with durations that make no sense: (query part, where, words)
WINDOW_ARGUMENTS = {
    "zero size": ("Tumble(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '0' MINUTE)",
                  "INTERVAL '0'", "dur argument must be positive"),
    "negative gap": ("Session(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '-1' MINUTE)",
                     "INTERVAL '-1'", "gap argument must be positive"),
}  # fmt: skip


@pytest.mark.parametrize("case", WINDOW_ARGUMENTS)
def test_window_durations_that_make_no_sense(stream, case: str) -> None:
    call, fragment, words = WINDOW_ARGUMENTS[case]
    text = f"SELECT *\nFROM {call}"
    assert_user_words(sql_error(text, stream), at(text, fragment), words)


def test_emit_after_a_zero_delay(stream) -> None:
    text = f"SELECT wstart, COUNT(*) AS n\nFROM {TUMBLE}\nGROUP BY wstart\n"
    text += "EMIT AFTER DELAY INTERVAL '0' SECOND"
    assert_user_words(sql_error(text, stream), at(text, "INTERVAL '0'"), "positive")


#: A windowing TVF over a bounded table whose time column holds no timestamps:
#: (the table's time column, words); never DuckDB's conversion error alone
TIME_COLUMNS = {
    "epoch milliseconds": ([1_000, 2_000], "holds int64 values, not timestamps"),
    "text that is no time": (["soon", "later"], "column 'bidtime': invalid timestamp"),
}  # fmt: skip


@pytest.mark.parametrize("case", TIME_COLUMNS)
def test_a_window_over_a_column_of_no_timestamps(case: str) -> None:
    values, words = TIME_COLUMNS[case]
    bids = pd.DataFrame({"bidtime": values, "price": [3, 5]})
    text = "SELECT *\nFROM Tumble(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)"
    err = sql_error(text, {"Bid": bids})
    assert_user_words(err, at(text, "bidtime"), words)
    assert "when casting from source column" not in str(err)


#: What is passed as a query or its tables that SQL cannot read: (query, tables, words)
BAD_TABLES = {
    "two columns of one name": ("SELECT price FROM Bid",
                                {"Bid": pd.DataFrame([[1, 2]], columns=["price", "price"])},
                                "table 'Bid' has two columns named 'price'"),
    "column names that are numbers": ("SELECT * FROM Bid", {"Bid": pd.DataFrame([[1, 2]])},
                                      "column names must be strings, not 0"),
    "a frame of no columns": ("SELECT * FROM Bid", {"Bid": pd.DataFrame()},
                              "table 'Bid' has no columns"),
    "a frame, not a dict": ("SELECT * FROM Bid", pd.DataFrame({"price": [1]}),
                            "tables must map each table's name to its table"),
    "no query text": (None, {"Bid": pd.DataFrame({"price": [1]})},
                      "the query must be SQL text, not NoneType"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_TABLES)
def test_a_query_or_table_sql_cannot_read(case: str) -> None:
    text, tables, words = BAD_TABLES[case]
    assert words in str(sql_error(text, tables))


@pytest.mark.parametrize("as_of", ["2024-01-01T10:05:00", pd.Timestamp("2024-01-01 10:05")])
def test_as_of_that_is_not_epoch_milliseconds(stream, as_of) -> None:
    with pytest.raises(SqlError, match="as_of must be a processing time in epoch milliseconds"):
        sql(f"SELECT wstart, COUNT(*) AS n\nFROM {TUMBLE}\nGROUP BY wstart", stream).to_pandas(
            as_of=as_of
        )


@pytest.mark.parametrize("lateness", ["5 minutes", -1, None])
def test_a_replay_lateness_that_is_not_milliseconds(tmp_path, lateness) -> None:
    path = tmp_path / "bid.jsonl"
    path.write_text(json.dumps({"ptime": _iso("10:01"), "row": {"bidtime": _iso("10:00")}}))
    with pytest.raises(SqlError, match=r"allowed_lateness must be a number of milliseconds"):
        read_replay(str(path), "Bid", "bidtime", allowed_lateness=lateness)


def test_a_negative_lateness_on_the_command_line(tmp_path, capsys) -> None:
    path = tmp_path / "bid.jsonl"
    path.write_text(json.dumps({"ptime": _iso("10:01"), "row": {"bidtime": _iso("10:00")}}))
    argv = ["SELECT * FROM Bid", "--replay", f"Bid={path}", "--event-time", "Bid.bidtime"]
    assert main([*argv, "--lateness", "Bid=-5s"]) == 2
    err = capsys.readouterr().err
    assert "--lateness Bid=-5s: the allowed lateness must not be negative" in err


def create(options: str, watermark: str = "INTERVAL '5' SECOND") -> str:
    return (
        "CREATE TABLE Bid (bidtime TIMESTAMP, price BIGINT,\n"
        f"  WATERMARK FOR bidtime AS bidtime - {watermark})\n"
        f"WITH ('format' = 'replay', 'path' = 'bid.jsonl',\n  {options})"
    )


#: A CREATE TABLE option that makes no sense: (options, where, words)
TABLE_OPTIONS = {
    "misspelt option": ("'allowed_latenes' = '5 seconds'", "'allowed_latenes'",
                        "unknown table option 'allowed_latenes'. Did you mean 'allowed_lateness'?"),
    "unknown option": ("'colour' = 'red'", "'colour'", "unknown table option 'colour'"),
    "negative lateness": ("'allowed_lateness' = '-5 seconds'", "'-5 seconds'",
                          "option 'allowed_lateness' must not be negative"),
    "lateness not a duration": ("'allowed_lateness' = 'soon'", "'soon'",
                                "option 'allowed_lateness': cannot read 'soon' as a duration"),
    "negative slack": ("'watermark' = 'k-slack', 'slack' = '-1 second'", "'-1 second'",
                       "option 'slack' must not be negative"),
}  # fmt: skip


@pytest.mark.parametrize("case", TABLE_OPTIONS)
def test_a_table_option_that_makes_no_sense(case: str) -> None:
    options, fragment, words = TABLE_OPTIONS[case]
    text = create(options)
    with pytest.raises(SqlError) as info:
        source_def(parse(text)[0])
    assert_user_words(info.value, at(text, fragment), words)


def test_a_negative_watermark_delay() -> None:
    text = create("'allowed_lateness' = '1 second'", watermark="INTERVAL '-5' SECOND")
    with pytest.raises(SqlError) as info:
        source_def(parse(text)[0])
    assert_user_words(info.value, at(text, "'-5'"), "watermark delay must not be negative")


# ------------------------------------------------------------------ the fluent API

FRAME = pd.DataFrame({"ts": [1_000, 2_000], "k": ["a", "b"], "v": [1, 2]})

#: A pipeline option that makes no sense: (build it, the error, words)
FLUENT = {
    "negative lateness": (
        lambda: hw.from_pandas(FRAME, "ts").window(hw.FixedWindows(60), allowed_lateness="-5 s"),
        PlanError, "allowed_lateness must not be negative"),
    "lateness not a duration": (
        lambda: hw.from_pandas(FRAME, "ts").window(hw.FixedWindows(60), allowed_lateness="soon"),
        PlanError, "allowed_lateness is not a duration (found: 'soon')"),
    "negative watermark": (lambda: hw.from_pandas(FRAME, "ts", watermark="-5 seconds"),
                           PlanError, "the watermark delay '-5 seconds' is negative"),
    "zero window size": (lambda: hw.FixedWindows(0), ValueError, "FixedWindows size must be"),
    "zero slide": (lambda: hw.SlidingWindows(10, 0), ValueError, "positive size and period"),
    "negative gap": (lambda: hw.Sessions(-1), ValueError, "Sessions gap must be positive"),
    "zero count": (lambda: hw.AfterCount(0), ValueError, "AfterCount needs a positive"),
    "negative delay": (lambda: hw.AfterProcessingTime(-1), ValueError,
                       "AfterProcessingTime delay and period must not be negative"),
    "NaN gap": (lambda: hw.Sessions(float("nan")), ValueError, "cannot read duration nan"),
    "unknown time zone": (lambda: hw.CalendarWindows("day", tz="Mars/Base"), ValueError,
                          "CalendarWindows tz must be a time zone"),
    "top 0": (lambda: hw.top_k("v", 0), ValueError, "TopK needs a positive integer k, got 0"),
    "top -1 (a slice would drop one)": (lambda: hw.top_k("v", -1), ValueError,
                                        "TopK needs a positive integer k, got -1"),
    "two columns of one name": (
        lambda: hw.from_pandas(FRAME.rename(columns={"k": "v"}), "ts"),
        PlanError, "duplicated columns ['v']"),
    "arrival times as text": (
        lambda: hw.from_pandas(FRAME.assign(at=["x", "y"]), "ts", arrival_time="at"),
        PlanError, "arrival-time column 'at' has type object"),
    "a null arrival time": (
        lambda: hw.from_pandas(FRAME.assign(at=[1, None]), "ts", arrival_time="at"),
        PlanError, "arrival-time column 'at' has 1 null(s)"),
}  # fmt: skip


@pytest.mark.parametrize("case", FLUENT)
def test_a_pipeline_option_that_makes_no_sense(case: str) -> None:
    build, error, words = FLUENT[case]
    with pytest.raises(error) as info:
        build()
    assert words in str(info.value)


def test_a_key_column_of_lists_is_named() -> None:
    """Lists cannot be grouped: the key column is named, not pandas' hash error."""
    pipeline = hw.from_pandas(FRAME.assign(k=[[1], [2]]), "ts")
    pipeline = pipeline.window(hw.FixedWindows(60)).group_by("k").agg(n=hw.count())
    with pytest.raises(PlanError, match="key column 'k' holds list values") as info:
        pipeline.to_pandas()
    assert info.value.argument == "k" and "map(tuple)" in str(info.value)


def test_a_negative_lateness_is_refused_by_the_plan_too() -> None:
    """A ready WindowingStrategy passed to .window() is checked as well."""
    strategy = hw.WindowingStrategy(hw.FixedWindows(60), allowed_lateness=-1)
    with pytest.raises(PlanError) as info:
        hw.from_pandas(FRAME, "ts").window(strategy)
    assert info.value.argument == "allowed_lateness"


# ------------------------------------------------------------------ result types

RESULT_TYPES = (
    f"SELECT wstart, item, SUM(price) AS total, SUM(score) AS points, COUNT(*) AS n,\n"
    f"  AVG(price) AS mean, MAX(price) AS hi\nFROM {TUMBLE}\nGROUP BY wstart, item"
)
SQL_TYPES = {"total": "int64", "points": "float64", "n": "int64", "mean": "float64", "hi": "int64"}


def _dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {c: str(frame[c].dtype) for c in SQL_TYPES}


@pytest.mark.parametrize("path", ["bounded", "fast", "general"])
def test_result_types_follow_sql(stream, table, path: str) -> None:
    """SUM of BIGINT is BIGINT, of DOUBLE is DOUBLE; COUNT BIGINT; AVG DOUBLE."""
    if path == "bounded":
        frames = [sql(RESULT_TYPES, table).to_pandas()]
    elif path == "fast":
        query = sql(RESULT_TYPES, stream)
        assert "fast path" in query.explain()
        frames = [query.changelog(), query.to_pandas()]
    else:
        query = sql(RESULT_TYPES, stream, fast_path=False)
        assert "runs on: general path" in query.explain()
        frames = [query.changelog(), query.to_pandas()]
    for frame in frames:
        assert _dtypes(frame) == SQL_TYPES
        assert sorted(frame["total"].tolist())[-1] == 10  # A: 3 + 7


# ------------------------------------------------------------------ on Spark


@pytest.mark.spark
def test_the_same_errors_on_spark(spark, stream, table) -> None:
    """Planning is shared: the same text on Spark (bounded and streams)."""
    from headwater.sql.execute.spark import SparkSqlQuery

    texts = [ARGUMENT_TYPES["windowed sum"][0], UNKNOWN_NAMES["windowed"][0]]
    texts += [SYNTAX["one parenthesis too many"][0], ARGUMENT_TYPES["epoch_ms of a string"][0]]
    for text in texts:
        for tables in (stream, table):
            with pytest.raises(SqlError) as info:
                SparkSqlQuery(text, tables, spark=spark).to_pandas()
            assert str(info.value) == str(sql_error(text, tables))


@pytest.mark.spark
def test_a_function_spark_sql_does_not_have(spark, table) -> None:
    """DuckDB binds it, Spark cannot: an error at the call, not Spark's plan dump."""
    from headwater.sql.execute.spark import SparkSqlQuery

    text = "SELECT item,\n  list_transform([price], v -> v + 1) AS l\nFROM Bid"
    assert len(sql(text, table).to_pandas()) == 3  # local runs it
    with pytest.raises(SqlError) as info:
        SparkSqlQuery(text, table, spark=spark).to_pandas()
    assert_user_words(info.value, at(text, "list_transform"), "no function 'list_transform'")
    assert "SQLSTATE" not in str(info.value)


@pytest.mark.spark
def test_result_types_on_spark_bounded(spark, table) -> None:
    from headwater.sql.execute.spark import SparkSqlQuery

    frame = SparkSqlQuery(RESULT_TYPES, table, spark=spark).to_pandas()
    assert _dtypes(frame) == SQL_TYPES
    local = sql(RESULT_TYPES, table).to_pandas()
    columns = ["item", *SQL_TYPES]
    rows = frame[columns].sort_values("item").reset_index(drop=True)
    pd.testing.assert_frame_equal(rows, local[columns].sort_values("item").reset_index(drop=True))


@pytest.mark.spark
def test_a_spark_stream_names_its_event_time_not_an_internal_column(spark, tmp_path) -> None:
    """A TIMESTAMP_NTZ event time is refused naming the user's column ('__et' never)."""
    from headwater.sql.execute.spark import SparkSqlQuery

    schema = "bidtime TIMESTAMP_NTZ, price BIGINT, item STRING"
    (tmp_path / "in").mkdir()
    df = spark.readStream.schema(schema).parquet(str(tmp_path / "in"))
    tables = {"Bid": hw.from_spark(df, "bidtime", watermark="1 second")}
    for text in (
        f"SELECT wstart, COUNT(*) AS n FROM {TUMBLE} GROUP BY wstart",  # fast path
        f"SELECT wstart, item, price FROM {TUMBLE}",  # general path
    ):
        query = SparkSqlQuery(text, tables, spark=spark)
        with pytest.raises(SqlError) as info:
            query.start(checkpoint_location=str(tmp_path / "checkpoint"))
        assert "'bidtime'" in str(info.value) and "TIMESTAMP_NTZ" in str(info.value)
        assert not any(internal in str(info.value) for internal in INTERNAL), str(info.value)


def test_a_flag_for_a_table_not_replayed_names_it(tmp_path, capsys) -> None:
    """``--event-time u.ts`` for ``--replay t=...``: the misspelt table is named."""
    path = tmp_path / "bid.jsonl"
    path.write_text(json.dumps({"ptime": _iso("10:01"), "row": {"bidtime": _iso("10:00")}}))
    argv = ["SELECT * FROM Bid", "--replay", f"Bid={path}", "--event-time", "Bids.bidtime"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--event-time Bids.COLUMN: no --replay Bids=FILE" in err and "(Bid)" in err


@pytest.mark.parametrize(
    "item",
    [
        "ARRAY_AGG(price) AS ps",
        "LIST(price ORDER BY price) AS ps",
        "{'p': MAX(price)} AS ps",
        "MAP([item], [MAX(price)]) AS ps",
    ],
)
def test_a_nested_result_of_a_stream_is_refused_at_its_item(stream, table, item) -> None:
    """A list, struct or map result column of a streaming query used to fail inside
    pandas at its first row (the changelog nets and numbers rows by value): refused
    at the item, and the hint's text form runs. A bounded table's result keeps it."""
    text = f"SELECT item, {item} FROM Bid GROUP BY item"
    with pytest.raises(SqlError, match="result column 'ps' is a .* value") as info:
        sql(f"{text} EMIT STREAM", stream).run()
    assert info.value.line == 1 and 14 <= info.value.col < 14 + len(item)  # within the item
    assert len(sql(text, table).to_pandas()) == 2
    value = item.removesuffix(" AS ps")
    as_text = f"SELECT item, CAST({value} AS VARCHAR) AS ps FROM Bid GROUP BY item"
    got = sql(f"{as_text} EMIT STREAM", stream).run().table()
    assert sorted(got["item"]) == ["A", "B"] and got["ps"].map(type).eq(str).all()
