"""Errors a user meets running a query (not parsing it: test_dialect.py covers the
parser): each is a SqlError at the line and column of the offending token, with a
readable message; a bad replay line names its file and line; the command line
exits with status 2 and prints the error on stderr, nothing on stdout."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from sql_helpers import write_replay

from headwater.sql import cli, read_replay, sql
from headwater.sql.errors import SqlError

DAY = "2024-01-01"
STEPS = [
    ("10:01", [("10:00", 3, "A"), ("10:02", 5, "B")], None),
    ("10:04", [("10:03", 7, "A")], "10:02"),
    ("10:12", [], "10:11"),
]
TUMBLE = "Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE)"


@pytest.fixture(scope="module")
def replay_path(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("errors")
    return write_replay(folder / "bid.jsonl", DAY, STEPS, "bidtime", ("bidtime", "price", "item"))


@pytest.fixture(scope="module")
def stream(replay_path):
    return {"Bid": read_replay(replay_path, "Bid", "bidtime")}


@pytest.fixture(scope="module")
def table(stream):
    return {"Bid": stream["Bid"].frame.drop(columns="__ptime")}


def at(text: str, fragment: str, nth: int = 0) -> tuple[int, int]:
    """(line, col), 1-based, of the ``nth`` occurrence of ``fragment`` in ``text``
    (``-1``: the last)."""
    index = text.rindex(fragment) if nth == -1 else -1
    for _ in range(nth + 1):
        index = text.index(fragment, index + 1)
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def error_of(text: str, tables: dict) -> SqlError:
    with pytest.raises(SqlError) as info:
        sql(text, tables).to_pandas()
    return info.value


def assert_at(err: SqlError, *positions: tuple[int, int]) -> None:
    assert (err.line, err.col) in positions, str(err)
    assert str(err).startswith(f"line {err.line}, column {err.col}: "), str(err)


# ------------------------------------------------------------------ tables and columns


@pytest.mark.parametrize("kind", ["stream", "table"])
def test_unknown_table(request, kind: str) -> None:
    tables = request.getfixturevalue(kind)
    text = "SELECT B.item, A.price\nFROM Bid B\n  JOIN Asks A ON A.item = B.item"
    err = error_of(text, tables)
    assert_at(err, at(text, "Asks"))
    assert "unknown table 'Asks'" in err.message and "Bid" in err.hint


UNKNOWN_COLUMNS = {
    "select": "SELECT item,\n       colour\nFROM Bid",
    "where": "SELECT item\nFROM Bid\nWHERE colour = 'red'",
    "aggregate": f"SELECT wstart, wend,\n  MAX(colour) AS m\nFROM {TUMBLE}\nGROUP BY wstart, wend",
    "join": f"SELECT B.item\nFROM {TUMBLE} B\n  JOIN {TUMBLE} C ON C.colour = B.item",
}


@pytest.mark.parametrize("kind", ["stream", "table"])
@pytest.mark.parametrize("where", UNKNOWN_COLUMNS)
def test_unknown_column(request, kind: str, where: str) -> None:
    text = UNKNOWN_COLUMNS[where]
    err = error_of(text, request.getfixturevalue(kind))
    assert_at(err, *[at(text, f) for f in ("colour", "C.colour") if f in text])
    assert "colour" in err.message
    assert "bidtime" in str(err), "the message lists the columns there are"


@pytest.mark.spark
def test_unknown_column_on_spark(spark, table) -> None:
    from headwater.sql.execute.spark import SparkSqlQuery

    text = UNKNOWN_COLUMNS["select"]
    with pytest.raises(SqlError) as info:
        SparkSqlQuery(text, table, spark=spark).to_pandas()
    assert_at(info.value, at(text, "colour"))


#: A call of a function DuckDB does not have: (query, its name, DuckDB's suggestion)
UNKNOWN_FUNCTIONS = {
    "select": ("SELECT item,\n       FOO(price) AS f\nFROM Bid", "FOO", "FLOOR"),
    "where": ("SELECT item\nFROM Bid\nWHERE lenght(item) > 1", "lenght", "LENGTH"),
    "aggregate": (
        f"SELECT wstart, wend,\n  SUMM(price) AS s\nFROM {TUMBLE}\nGROUP BY wstart, wend",
        "SUMM",
        "SUM",
    ),
}


@pytest.mark.parametrize("kind", ["stream", "table"])
@pytest.mark.parametrize("where", UNKNOWN_FUNCTIONS)
def test_unknown_function(request, kind: str, where: str) -> None:
    text, name, suggestion = UNKNOWN_FUNCTIONS[where]
    err = error_of(text, request.getfixturevalue(kind))
    assert_at(err, at(text, name))
    assert err.message == f"unknown function {name!r}"
    assert f"Did you mean {suggestion}?" in err.hint


@pytest.mark.spark
def test_unknown_function_on_spark(spark, stream, table) -> None:
    """The validation is the runners' shared one: the same error on Spark."""
    from headwater.sql.execute.spark import SparkSqlQuery

    text = UNKNOWN_FUNCTIONS["select"][0]
    for tables in (stream, table):
        with pytest.raises(SqlError) as info:
            SparkSqlQuery(text, tables, spark=spark).to_pandas()
        assert str(info.value) == str(error_of(text, tables))


# ------------------------------------------------------------------ windowing TVFs


TVF_ARGUMENTS = {
    # argument of the wrong kind: what to write, where it points
    "data": ("Tumble(data => DESCRIPTOR(bidtime), timecol => DESCRIPTOR(bidtime), "
             "dur => INTERVAL '1' MINUTE)", "DESCRIPTOR(bidtime), timecol", "must be a table"),
    "timecol": ("Tumble(TABLE(Bid), bidtime, INTERVAL '1' MINUTE)", "bidtime,",
                "DESCRIPTOR(column)"),
    "dur": ("Tumble(TABLE(Bid), DESCRIPTOR(bidtime), 10)", "10", "must be an INTERVAL"),
    "hop": ("Hop(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '1' MINUTE, TABLE(Bid))",
            "TABLE(Bid))", "must be an INTERVAL"),
    "no such column": ("Tumble(TABLE(Bid), DESCRIPTOR(bidtme), INTERVAL '1' MINUTE)",
                       "bidtme", "no column 'bidtme'"),
    "not the event time": ("Tumble(TABLE(Bid), DESCRIPTOR(price), INTERVAL '1' MINUTE)",
                           "price", "not the event time"),
}  # fmt: skip


@pytest.mark.parametrize("case", TVF_ARGUMENTS)
def test_tvf_argument_of_the_wrong_kind(stream, case: str) -> None:
    call, fragment, words = TVF_ARGUMENTS[case]
    text = f"SELECT *\nFROM {call}"
    err = error_of(text, stream)
    assert_at(err, at(text, fragment))
    assert words in str(err)


# ------------------------------------------------------------------ streams


UNBOUNDED = {
    "group by": "SELECT item, COUNT(*) AS n\nFROM Bid\nGROUP BY item",
    "aggregate": "SELECT COUNT(*) AS n,\n       SUM(price) AS total\nFROM Bid",
    "subquery": "SELECT * FROM (\n  SELECT item, MAX(price) AS hi FROM Bid GROUP BY item) t",
}


@pytest.mark.parametrize("case", UNBOUNDED)
def test_unbounded_group_by_after_watermark_is_refused(stream, case: str) -> None:
    """An unwindowed aggregate runs (per key, updated with retractions: test_keys.py),
    but no watermark completes its groups: EMIT AFTER WATERMARK is refused there."""
    sql(UNBOUNDED[case], stream).to_pandas()
    text = UNBOUNDED[case] + "\nEMIT AFTER WATERMARK"
    err = error_of(text, stream)
    assert_at(err, at(text, "EMIT"))
    assert "AFTER WATERMARK" in err.message and "Tumble" in err.hint


def test_grouping_by_the_event_time_is_a_key(stream) -> None:
    out = sql("SELECT bidtime, COUNT(*) AS n FROM Bid GROUP BY bidtime", stream).to_pandas()
    assert sorted(out["n"]) == [1, 1, 1]


@pytest.mark.parametrize("clause", ["ORDER BY price DESC", "LIMIT 2"])
def test_order_by_or_limit_with_emit_stream(stream, clause: str) -> None:
    text = f"SELECT item, price\nFROM Bid\n{clause}\nEMIT STREAM"
    err = error_of(text, stream)
    keyword = clause.split()[0]
    first = clause.split()[-2] if keyword == "ORDER" else clause.split()[-1]
    assert_at(err, at(text, keyword), at(text, first, 0 if keyword == "LIMIT" else 1))
    assert "EMIT STREAM" in err.message


def test_order_by_and_limit_order_a_table_view(stream) -> None:
    text = "SELECT item, price FROM Bid ORDER BY price DESC LIMIT 2"
    assert list(sql(text, stream).to_pandas()["price"]) == [7, 5]


@pytest.mark.parametrize(
    "emit, fragment, words",
    [
        ("EMIT AFTER SOMETIME", "SOMETIME", "Valid forms: EMIT STREAM"),
        ("EMIT EVERYTHING", "EVERYTHING", "Valid forms: EMIT STREAM"),
        ("EMIT STREAM AFTER DELAY 5", "5", "needs an INTERVAL"),
        ("EMIT AFTER WATERMARK AND AFTER WATERMARK", "WATERMARK", "given twice"),
    ],
)
def test_an_emit_form_that_does_not_exist(stream, emit: str, fragment: str, words: str) -> None:
    text = f"SELECT item, price\nFROM Bid\n{emit}"
    err = error_of(text, stream)
    assert_at(err, at(text, fragment, -1))
    assert words in str(err)


# ------------------------------------------------------------------ replay files


BAD_LINES = {
    "not json": ('{"ptime": "2024-01-01T10:05:00", "row": {', "not JSON"),
    "no ptime": ('{"row": {"bidtime": "2024-01-01T10:05:00", "price": 1}}', "'ptime'"),
    "both": ('{"ptime": "2024-01-01T10:05:00", "row": {}, "watermark": "2024-01-01T10:00:00"}',
             "either a 'row' or a 'watermark'"),
    "neither": ('{"ptime": "2024-01-01T10:05:00"}', "either a 'row' or a 'watermark'"),
    "row not an object": ('{"ptime": "2024-01-01T10:05:00", "row": [1, 2]}', "'row'"),
    "bad time": ('{"ptime": "yesterday", "row": {"bidtime": "2024-01-01T10:05:00"}}',
                 "'yesterday'"),
    "bad watermark": ('{"ptime": "2024-01-01T10:05:00", "watermark": "noon"}', "'noon'"),
    "back in time": ('{"ptime": "2024-01-01T09:00:00", "watermark": "2024-01-01T09:00:00"}',
                     "back in time"),
}  # fmt: skip


def bad_replay(tmp_path, line: str) -> tuple[str, int]:
    """A replay whose 4th line (after a blank 3rd) is ``line``: (path, line number)."""
    good = [
        {"ptime": "2024-01-01T10:01:00", "row": {"bidtime": "2024-01-01T10:00:00", "price": 3}},
        {"ptime": "2024-01-01T10:02:00", "watermark": "2024-01-01T10:00:00"},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([*map(json.dumps, good), "", line]) + "\n", encoding="utf-8")
    return str(path), 4


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_replay_line_names_the_file_and_line(tmp_path, case: str) -> None:
    line, words = BAD_LINES[case]
    path, number = bad_replay(tmp_path, line)
    with pytest.raises(SqlError) as info:
        read_replay(path, "Bid", "bidtime")
    assert f"{path}, line {number}" in str(info.value)
    assert words in str(info.value)


def test_a_replay_without_its_event_time_column(tmp_path) -> None:
    path = write_replay(tmp_path / "r.jsonl", DAY, STEPS, "bidtime", ("bidtime", "price", "item"))
    with pytest.raises(SqlError) as info:
        read_replay(path, "Bid", "bid_time")
    assert path in str(info.value) and "'bid_time'" in str(info.value)
    assert "bidtime" in info.value.hint


# ------------------------------------------------------------------ command line


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_bad_query(capsys, replay_path) -> None:
    text = "SELECT item\nFROM Bid\nEMIT AFTER SOMETIME"
    args = ["--replay", f"Bid={replay_path}", "--event-time", "Bid.bidtime"]
    status, out, err = run_cli(capsys, text, *args)
    line, col = at(text, "SOMETIME")
    assert (status, out) == (2, "")
    assert err.startswith(f"headwater sql: error: line {line}, column {col}: ")
    assert err.count("\n") == 1, "one line, no traceback"


def test_cli_unknown_column(capsys, replay_path) -> None:
    text = "SELECT item,\n  colour FROM Bid"
    args = ["--replay", f"Bid={replay_path}", "--event-time", "Bid.bidtime", "--format", "csv"]
    status, out, err = run_cli(capsys, text, *args)
    assert (status, out) == (2, "")
    assert "line 2, column 3: " in err and "colour" in err


def test_cli_bad_replay_line(capsys, tmp_path) -> None:
    path, number = bad_replay(tmp_path, BAD_LINES["not json"][0])
    status, out, err = run_cli(
        capsys, "SELECT * FROM Bid", "--replay", f"Bid={path}", "--event-time", "Bid.bidtime"
    )
    assert (status, out) == (2, "")
    assert f"{path}, line {number}: not JSON" in err


def test_cli_replay_without_event_time(capsys, replay_path) -> None:
    status, out, err = run_cli(capsys, "SELECT * FROM Bid", "--replay", f"Bid={replay_path}")
    assert (status, out) == (2, "")
    assert "--event-time Bid.COLUMN" in err


def test_cli_unknown_table_says_how_to_add_it(capsys, replay_path) -> None:
    args = ["--replay", f"Bid={replay_path}", "--event-time", "Bid.bidtime"]
    status, out, err = run_cli(capsys, "SELECT * FROM Ask", *args)
    assert (status, out) == (2, "")
    assert "line 1, column 15: unknown table 'Ask'" in err and "--replay Ask=FILE" in err


def test_cli_a_missing_replay_file(capsys, tmp_path) -> None:
    missing = tmp_path / "nowhere.jsonl"
    args = ["--replay", f"Bid={missing}", "--event-time", "Bid.bidtime"]
    status, out, err = run_cli(capsys, "SELECT * FROM Bid", *args)
    assert (status, out) == (2, "")
    assert str(missing) in err


def test_cli_ok_prints_csv(capsys, replay_path) -> None:
    """The counterpart: a good query exits 0, prints CSV and nothing on stderr."""
    args = ["--replay", f"Bid={replay_path}", "--event-time", "Bid.bidtime", "--format", "csv"]
    status, out, err = run_cli(capsys, "SELECT item, price FROM Bid EMIT STREAM", *args)
    assert (status, err) == (0, "")
    frame = pd.read_csv(pd.io.common.StringIO(out))
    assert list(frame.columns) == ["item", "price", "undo", "ptime", "ver"]
    assert len(frame) == 3
