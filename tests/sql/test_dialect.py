"""The Headwater SQL dialect: what parses, into which nodes, and the errors (with
their positions) of what does not."""

from __future__ import annotations

import pytest
from sqlglot import exp

from headwater.sql.parse.dialect import (
    Emit,
    Headwater,
    SourceDef,
    SqlError,
    WindowTVF,
    parse,
    parse_query,
    position,
    source_def,
)

MINUTE = 60_000
BID = "TABLE(Bid), DESCRIPTOR(bidtime)"


def only_tvf(text: str) -> WindowTVF:
    (tvf,) = parse_query(text).find_all(WindowTVF)
    return tvf


def error(text: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        parse(text)
    return info.value


def at(text: str, fragment: str) -> tuple[int, int]:
    """(line, col), 1-based, of the last ``fragment`` in ``text``."""
    index = text.rindex(fragment)
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def assert_error_at(text: str, fragment: str, words: str) -> SqlError:
    """parse(text) fails at the last ``fragment`` with a message containing ``words``."""
    err = error(text)
    assert (err.line, err.col) == at(text, fragment), str(err)
    assert words in err.message, str(err)
    return err


def round_trips(tree: exp.Expr) -> None:
    text = tree.sql(dialect=Headwater)
    assert parse(text)[0] == tree, text


# --- the paper's spelling -------------------------------------------------------------


def test_paper_tumble_with_named_arguments() -> None:
    tvf = only_tvf(
        "SELECT * FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
        "dur => INTERVAL '10' MINUTE) TumbleBid"
    )
    assert tvf.args["kind"] == "TUMBLE"
    assert isinstance(tvf.this, exp.Table) and tvf.this.name == "Bid"
    assert isinstance(tvf.args["timecol"], exp.Column) and tvf.args["timecol"].name == "bidtime"
    assert tvf.args["size"] == 10 * MINUTE
    assert tvf.args.get("offset") is None and tvf.args.get("slide") is None
    assert tvf.args["flink"] is False
    assert tvf.alias == "TumbleBid"
    assert isinstance(tvf.args["alias"], exp.TableAlias)
    assert isinstance(tvf.parent, exp.From)


def test_paper_tumble_offset_and_as_alias() -> None:
    tvf = only_tvf(
        f"SELECT * FROM Tumble({BID}, INTERVAL '10' MINUTE, offset => INTERVAL '2' MINUTE) AS t"
    )
    assert (tvf.args["size"], tvf.args["offset"], tvf.alias) == (10 * MINUTE, 2 * MINUTE, "t")


def test_paper_hop_size_then_hop() -> None:
    tvf = only_tvf(
        "SELECT * FROM Hop(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
        "dur => INTERVAL '10' MINUTE, hopsize => INTERVAL '5' MINUTE, "
        "offset => INTERVAL '1' MINUTE)"
    )
    assert tvf.args["kind"] == "HOP"
    assert (tvf.args["size"], tvf.args["slide"], tvf.args["offset"]) == (
        10 * MINUTE,
        5 * MINUTE,
        MINUTE,
    )


def test_paper_hop_positional() -> None:
    tvf = only_tvf(f"SELECT * FROM Hop({BID}, INTERVAL '10' MINUTE, INTERVAL '5' MINUTE)")
    assert (tvf.args["size"], tvf.args["slide"]) == (10 * MINUTE, 5 * MINUTE)


@pytest.mark.parametrize(
    ("keys_arg", "keys"),
    [
        ("", None),
        (", DESCRIPTOR(item)", ["item"]),
        (", keys => DESCRIPTOR(item, x)", ["item", "x"]),
    ],
)
def test_paper_session(keys_arg: str, keys: list[str] | None) -> None:
    tvf = only_tvf(
        "SELECT * FROM Session(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
        f"gap => INTERVAL '5' MINUTE{keys_arg})"
    )
    assert (tvf.args["kind"], tvf.args["gap"]) == ("SESSION", 5 * MINUTE)
    found = tvf.args.get("keys")
    assert (None if found is None else [k.name for k in found]) == keys
    assert all(isinstance(k, exp.Column) for k in found or [])


@pytest.mark.parametrize("name", ["Tumble", "TUMBLE", "tumble", "tUmBlE"])
def test_function_names_are_case_insensitive(name: str) -> None:
    tvf = only_tvf(f"SELECT * FROM {name}(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)")
    assert (tvf.args["kind"], tvf.args["flink"]) == ("TUMBLE", False)


def test_named_arguments_in_any_order() -> None:
    tvf = only_tvf(
        "SELECT * FROM Tumble(dur => INTERVAL '1' MINUTE, timecol => DESCRIPTOR(bidtime), "
        "data => TABLE(Bid))"
    )
    assert (tvf.this.name, tvf.args["timecol"].name, tvf.args["size"]) == ("Bid", "bidtime", MINUTE)


@pytest.mark.parametrize("data", ["TABLE Bid", "TABLE(Bid)", "TABLE (Bid)", "TABLE(db.Bid)"])
def test_table_argument_with_or_without_parentheses(data: str) -> None:
    tvf = only_tvf(f"SELECT * FROM Tumble({data}, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)")
    assert isinstance(tvf.this, exp.Table) and tvf.this.name == "Bid"


@pytest.mark.parametrize(
    "data", ["TABLE(SELECT * FROM Bid WHERE price > 1)", "(SELECT * FROM Bid)"]
)
def test_data_may_be_a_subquery(data: str) -> None:
    tvf = only_tvf(f"SELECT * FROM Tumble({data}, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE) b")
    assert isinstance(tvf.this, exp.Subquery)
    assert isinstance(tvf.this.this, exp.Select)
    assert tvf.alias == "b"


# --- Flink's spelling ---------------------------------------------------------------


def test_flink_tumble() -> None:
    tvf = only_tvf(
        "SELECT * FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))"
    )
    assert (tvf.args["kind"], tvf.args["size"], tvf.args["flink"]) == ("TUMBLE", 10 * MINUTE, True)
    assert tvf.this.name == "Bid" and tvf.alias == ""


def test_flink_hop_takes_the_slide_first() -> None:
    tvf = only_tvf(
        "SELECT * FROM TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, "
        "INTERVAL '10' MINUTES)) AS h"
    )
    assert (tvf.args["slide"], tvf.args["size"], tvf.alias) == (5 * MINUTE, 10 * MINUTE, "h")


@pytest.mark.parametrize(("partition", "keys"), [("item", ["item"]), ("(item, x)", ["item", "x"])])
def test_flink_session_partition_by(partition: str, keys: list[str]) -> None:
    tvf = only_tvf(
        f"SELECT * FROM TABLE(SESSION(TABLE Bid PARTITION BY {partition}, DESCRIPTOR(bidtime), "
        "INTERVAL '5' MINUTES))"
    )
    assert (tvf.args["kind"], tvf.args["gap"], tvf.args["flink"]) == ("SESSION", 5 * MINUTE, True)
    assert [k.name for k in tvf.args["keys"]] == keys


def test_flink_named_arguments() -> None:
    tvf = only_tvf(
        "SELECT * FROM TABLE(HOP(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), "
        "SIZE => INTERVAL '10' MINUTES, SLIDE => INTERVAL '5' MINUTES, "
        "OFFSET => INTERVAL '1' MINUTE))"
    )
    assert (tvf.args["size"], tvf.args["slide"], tvf.args["offset"]) == (
        10 * MINUTE,
        5 * MINUTE,
        MINUTE,
    )
    gap = only_tvf(
        "SELECT * FROM TABLE(SESSION(DATA => TABLE Bid PARTITION BY item, "
        "TIMECOL => DESCRIPTOR(bidtime), GAP => INTERVAL '5' MINUTES))"
    )
    assert (gap.args["gap"], [k.name for k in gap.args["keys"]]) == (5 * MINUTE, ["item"])


@pytest.mark.parametrize(
    ("interval", "ms"),
    [
        ("INTERVAL '10' MINUTE", 600_000),
        ("INTERVAL '10' MINUTES", 600_000),
        ("INTERVAL '3' SECONDS", 3_000),
        ("INTERVAL '2' HOURS", 7_200_000),
        ("INTERVAL '1' DAYS", 86_400_000),
        ("INTERVAL '250' MILLISECOND", 250),
        ("INTERVAL '250' MILLISECONDS", 250),
        ("INTERVAL '1.5' SECOND", 1_500),
        ("INTERVAL 10 MINUTE", 600_000),
        ("INTERVAL '5 minutes'", 300_000),
        ("INTERVAL '1:30' MINUTE TO SECOND", 90_000),
        ("INTERVAL '1 02:00:00' DAY TO SECOND", 93_600_000),
    ],
)
def test_interval_units_in_both_spellings(interval: str, ms: int) -> None:
    paper = only_tvf(f"SELECT * FROM Tumble({BID}, {interval})")
    flink = only_tvf(f"SELECT * FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), {interval}))")
    assert paper.args["size"] == flink.args["size"] == ms


# --- joins ----------------------------------------------------------------------------


def test_join_of_two_tvfs() -> None:
    query = parse_query(
        "SELECT * FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
        "dur => INTERVAL '10' MINUTE) A JOIN Tumble(data => TABLE(Ask), "
        "timecol => DESCRIPTOR(asktime), dur => INTERVAL '10' MINUTE) B "
        "ON A.wstart = B.wstart AND A.wend = B.wend"
    )
    left, right = query.args["from_"].this, query.args["joins"][0].this
    assert isinstance(left, WindowTVF) and isinstance(right, WindowTVF)
    assert (left.alias, left.this.name, right.alias, right.this.name) == ("A", "Bid", "B", "Ask")
    assert query.args["joins"][0].args["on"].sql() == "A.wstart = B.wstart AND A.wend = B.wend"


def test_comma_join_with_a_tvf() -> None:
    query = parse_query(f"SELECT * FROM Item, Tumble({BID}, INTERVAL '1' MINUTE) AS t")
    assert isinstance(query.args["joins"][0].this, WindowTVF)


# --- EMIT -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clause", "stream", "watermark", "delay"),
    [
        ("EMIT STREAM", True, False, None),
        ("EMIT AFTER WATERMARK", False, True, None),
        ("EMIT STREAM AFTER WATERMARK", True, True, None),
        ("EMIT AFTER DELAY INTERVAL '6' MINUTE", False, False, 6 * MINUTE),
        ("EMIT STREAM AFTER DELAY INTERVAL '6' MINUTES", True, False, 6 * MINUTE),
        ("EMIT AFTER DELAY INTERVAL '1' MINUTE AND AFTER WATERMARK", False, True, MINUTE),
        ("EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE", True, True, MINUTE),
        ("emit stream after watermark", True, True, None),
    ],
)
def test_emit_forms(clause: str, stream: bool, watermark: bool, delay: int | None) -> None:
    query = parse_query(f"SELECT * FROM Bid {clause}")
    emit = query.args["emit"]
    assert isinstance(emit, Emit)
    assert (emit.args["stream"], emit.args["watermark"], emit.args["delay"]) == (
        stream,
        watermark,
        delay,
    )
    round_trips(query)


def test_no_emit() -> None:
    assert parse_query("SELECT * FROM Bid").args.get("emit") is None


def test_emit_is_not_a_table_or_column_alias() -> None:
    query = parse_query("SELECT * FROM Bid EMIT STREAM")
    assert query.args["from_"].this.alias == ""
    assert parse_query("SELECT price EMIT STREAM").expressions[0].alias == ""
    tvf = only_tvf(f"SELECT * FROM Tumble({BID}, INTERVAL '1' MINUTE) EMIT STREAM")
    assert tvf.alias == ""


def test_emit_after_order_by_and_limit_on_a_union() -> None:
    query = parse_query(
        "SELECT a FROM x UNION ALL SELECT a FROM y ORDER BY a LIMIT 3 EMIT AFTER WATERMARK"
    )
    assert isinstance(query, exp.Union)
    assert query.args["emit"].args["watermark"] is True
    assert query.args["limit"] is not None and query.args["order"] is not None
    round_trips(query)


def test_emit_inside_insert() -> None:
    (insert,) = parse("INSERT INTO Out SELECT * FROM Bid EMIT STREAM")
    assert isinstance(insert, exp.Insert) and insert.this.name == "Out"
    assert insert.expression.args["emit"].args["stream"] is True
    round_trips(insert)


@pytest.mark.parametrize(
    ("text", "fragment", "words"),
    [
        ("SELECT * FROM Bid EMIT AFTER LUNCH", "LUNCH", "WATERMARK or DELAY"),
        ("SELECT * FROM Bid\nEMIT STREAM STREAM", "STREAM", "STREAM does not belong"),
        ("SELECT * FROM Bid EMIT AFTER DELAY", "DELAY", "needs an INTERVAL"),
        ("SELECT * FROM Bid EMIT AFTER DELAY 5", "5", "needs an INTERVAL"),
        ("SELECT * FROM Bid EMIT AFTER DELAY INTERVAL '-1' MINUTE", "INTERVAL", "positive"),
        ("SELECT * FROM Bid EMIT AFTER DELAY INTERVAL '0' SECOND", "INTERVAL", "positive"),
        ("SELECT * FROM Bid EMIT", "EMIT", "EMIT needs"),
        ("SELECT * FROM Bid EMIT STREAM LIMIT 1", "LIMIT", "LIMIT does not belong"),
        ("SELECT * FROM Bid EMIT WATERMARK", "WATERMARK", "EMIT needs"),
    ],
)
def test_invalid_emit(text: str, fragment: str, words: str) -> None:
    err = assert_error_at(text, fragment, words)
    assert "EMIT STREAM" in err.hint and "AFTER WATERMARK" in err.hint and "AFTER DELAY" in err.hint


def test_emit_twice_the_same_trigger() -> None:
    text = "SELECT * FROM Bid EMIT AFTER WATERMARK AND AFTER WATERMARK"
    assert_error_at(text, "WATERMARK", "given twice")


def test_emit_needs_a_query() -> None:
    assert_error_at("INSERT INTO Out VALUES (1) EMIT STREAM", "EMIT", "EMIT ends a query")
    assert_error_at("CREATE TABLE t (a INT) EMIT STREAM", "EMIT", "Unexpected EMIT")


# --- CREATE TABLE ---------------------------------------------------------------------


def test_create_source_table() -> None:
    (create,) = parse(
        "CREATE TABLE Bid (bidtime TIMESTAMP, price DECIMAL(10,2), item VARCHAR,\n"
        "  WATERMARK FOR bidtime AS bidtime - INTERVAL '5' SECOND)\n"
        "WITH ('path' = '/data/bids', 'format' = 'parquet', 'Allowed_Lateness' = '1 minute')"
    )
    assert isinstance(create, exp.Create)
    assert source_def(create) == SourceDef(
        name="Bid",
        columns={"bidtime": "TIMESTAMP", "price": "DECIMAL(10,2)", "item": "VARCHAR"},
        event_time="bidtime",
        watermark_delay_ms=5_000,
        options={"path": "/data/bids", "format": "parquet", "allowed_lateness": "1 minute"},
        line=1,
    )
    assert source_def(parse(create.sql(dialect=Headwater))[0]) == source_def(create)


def test_create_sink_table() -> None:
    (_, create) = parse(
        "SELECT 1;\nCREATE TABLE Out (wstart TIMESTAMP, n BIGINT) "
        "WITH ('path' = '/out', format = 'changelog')"
    )
    table = source_def(create)
    assert (table.name, table.event_time, table.watermark_delay_ms) == ("Out", None, None)
    assert table.columns == {"wstart": "TIMESTAMP", "n": "BIGINT"}
    assert table.options == {"path": "/out", "format": "changelog"}
    assert table.line == 2


def test_watermark_without_delay() -> None:
    (create,) = parse("CREATE TABLE Bid (bidtime TIMESTAMP(3), WATERMARK FOR bidtime AS bidtime)")
    table = source_def(create)
    assert (table.event_time, table.watermark_delay_ms) == ("bidtime", 0)
    assert table.columns == {"bidtime": "TIMESTAMP(3)"}


@pytest.mark.parametrize(
    ("text", "fragment", "words"),
    [
        ("CREATE TABLE Bid (t TIMESTAMP, WATERMARK FOR x AS x)", "x AS", "not a column"),
        ("CREATE TABLE Bid (t BIGINT, WATERMARK FOR t AS t)", "t AS", "not a TIMESTAMP"),
        (
            "CREATE TABLE Bid (t TIMESTAMP, WATERMARK FOR t AS t - INTERVAL 'soon' SECOND)",
            "'soon'",
            "as a duration",
        ),
        ("CREATE TABLE Bid (t TIMESTAMP, WATERMARK FOR t AS t + 5)", "t + 5", "watermark"),
        (
            "CREATE TABLE Bid (t TIMESTAMP, u TIMESTAMP, "
            "WATERMARK FOR t AS u - INTERVAL '1' SECOND)",
            "u - INTERVAL",
            "computed from 'u'",
        ),
        (
            "CREATE TABLE Bid (t TIMESTAMP, WATERMARK FOR t AS t - INTERVAL '-1' SECOND)",
            "'-1'",
            "negative",
        ),
        ("CREATE TABLE Bid (a INT, a INT)", "a INT)", "declared twice"),
        ("CREATE TABLE Bid (a INT, PRIMARY KEY (a))", "a))", "without NOT ENFORCED"),
        ("CREATE TABLE Bid AS SELECT 1", "Bid", "column list"),
    ],
)
def test_malformed_table(text: str, fragment: str, words: str) -> None:
    (create,) = parse(text)
    with pytest.raises(SqlError) as info:
        source_def(create)
    err = info.value
    assert ((err.line, err.col), words in err.message) == (at(text, fragment), True), str(err)


def test_watermark_syntax_error() -> None:
    assert_error_at("CREATE TABLE Bid (t TIMESTAMP, WATERMARK FOR t t)", "t)", "expected AS before")


def test_columns_named_like_keywords() -> None:
    (create,) = parse("CREATE TABLE Marks (watermark TIMESTAMP, emit INT, session INT)")
    assert source_def(create).columns == {"watermark": "TIMESTAMP", "emit": "INT", "session": "INT"}


# --- wrong TVF arguments --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment", "words"),
    [
        (
            "data => Bid, timecol => DESCRIPTOR(bidtime), dur => INTERVAL '1' MINUTE",
            "Bid",
            "data argument must be a table",
        ),
        (
            "TABLE(Bid), timecol => bidtime, dur => INTERVAL '1' MINUTE",
            "bidtime",
            "timecol argument must be DESCRIPTOR",
        ),
        ("TABLE(Bid), DESCRIPTOR(a, b), INTERVAL '1' MINUTE", "DESCRIPTOR", "one event-time"),
        ("TABLE(Bid), DESCRIPTOR(1), INTERVAL '1' MINUTE", "DESCRIPTOR", "must name columns"),
        (f"{BID}, dur => 10", "10", "dur argument must be an INTERVAL"),
        (f"{BID}, INTERVAL '0' MINUTE", "INTERVAL", "must be positive"),
        (f"{BID}, INTERVAL '-5' MINUTE", "INTERVAL", "must be positive"),
        (f"{BID}, INTERVAL '1' MONTH", "INTERVAL", "as a duration"),
        (f"{BID}, INTERVAL '1' MINUTE, foo => 1", "foo", "no argument named foo"),
        (f"{BID}, INTERVAL '1' MINUTE, offset => 5", "5", "offset argument must be an INTERVAL"),
        (f"{BID}, INTERVAL '1' MINUTE, INTERVAL '1' MINUTE, 1", "1)", "at most 4 arguments"),
        (f"data => TABLE(Bid), data => TABLE(Bid), {BID[12:]}", "data", "given twice"),
        ("TABLE Bid PARTITION BY item, DESCRIPTOR(t), INTERVAL '1' MINUTE", "TABLE", "SESSION"),
    ],
)
def test_wrong_tumble_argument(args: str, fragment: str, words: str) -> None:
    text = f"SELECT *\nFROM Tumble({args}) AS t"
    assert_error_at(text, fragment, words)


@pytest.mark.parametrize(
    ("call", "fragment", "missing"),
    [
        ("Tumble(TABLE(Bid), DESCRIPTOR(bidtime))", "Tumble", "Tumble is missing its dur"),
        ("Tumble()", "Tumble", "Tumble is missing its data"),
        (
            "Hop(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)",
            "Hop",
            "Hop is missing its hopsize",
        ),
        (
            "Session(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime))",
            "Session",
            "Session is missing its gap",
        ),
        (
            "TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))",
            "HOP",
            "HOP is missing its SIZE",
        ),
    ],
)
def test_missing_argument(call: str, fragment: str, missing: str) -> None:
    err = assert_error_at(f"SELECT * FROM {call}", fragment, missing)
    assert "=>" in err.hint


def test_table_must_wrap_a_tvf() -> None:
    assert_error_at("SELECT * FROM TABLE(Bid)", "Bid", "must wrap a windowing table function")


def test_tvf_outside_from() -> None:
    assert_error_at(f"SELECT Tumble({BID}, INTERVAL '1' MINUTE) FROM t", "Tumble", "FROM or JOIN")


def test_unclosed_tvf() -> None:
    err = error("SELECT * FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)")
    assert "expected ')'" in err.message and err.line == 1


# --- ordinary SQL ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "SELECT CASE WHEN price > 10 THEN 'high' ELSE 'low' END AS band FROM Bid",
        "SELECT item, COUNT(DISTINCT bidder) FROM Bid GROUP BY item HAVING COUNT(*) > 2",
        "SELECT * FROM (SELECT item, price FROM Bid) AS b WHERE price > 1",
        "SELECT * FROM Bid WHERE item IN (SELECT item FROM Item)",
        "SELECT * FROM Bid AS b WHERE EXISTS(SELECT 1 FROM Item AS i WHERE i.id = b.item)",
        "SELECT * FROM Bid WHERE price > (SELECT AVG(price) FROM Bid)",
        "SELECT item FROM Bid UNION ALL SELECT item FROM Ask",
        "SELECT price, ROW_NUMBER() OVER (PARTITION BY wstart, wend ORDER BY price DESC) AS rn "
        "FROM t",
        "SELECT * FROM Bid ORDER BY price DESC LIMIT 10",
        "SELECT * FROM a JOIN b ON a.x = b.x LEFT JOIN c ON a.x = c.x",
        "SELECT * FROM a LEFT SEMI JOIN b ON a.x = b.x LEFT ANTI JOIN c ON a.x = c.x",
        "SELECT bidtime + INTERVAL '5' MINUTE FROM Bid WHERE bidtime - INTERVAL '1' HOUR > t",
        "WITH w AS (SELECT * FROM Bid) SELECT * FROM w",
        "SELECT session, window_start FROM t",
    ],
)
def test_ordinary_sql(text: str) -> None:
    query = parse_query(text)
    assert query.sql(dialect=Headwater) == text
    assert query.args.get("emit") is None


def test_semi_and_anti_joins() -> None:
    joins = parse_query("SELECT * FROM a LEFT SEMI JOIN b ON a.x = b.x").args["joins"]
    assert (joins[0].side, joins[0].kind) == ("LEFT", "SEMI")


# --- generator ------------------------------------------------------------------------


def test_generator_writes_the_paper_spelling() -> None:
    query = parse_query(
        f"SELECT * FROM tumble({BID}, INTERVAL '600' SECONDS, INTERVAL '1' MINUTE) tb "
        "EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '90' SECOND"
    )
    assert query.sql(dialect=Headwater) == (
        "SELECT * FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
        "dur => INTERVAL '10' MINUTE, offset => INTERVAL '1' MINUTE) AS tb "
        "EMIT STREAM AFTER DELAY INTERVAL '90' SECOND AND AFTER WATERMARK"
    )


@pytest.mark.parametrize(
    "tvf",
    [
        f"Hop({BID}, INTERVAL '10' MINUTE, INTERVAL '5' MINUTE) AS h",
        f"Session({BID}, INTERVAL '5' MINUTE, DESCRIPTOR(item, x))",
        "Tumble(TABLE(SELECT * FROM Bid WHERE price > 1), DESCRIPTOR(bidtime), "
        "INTERVAL '250' MILLISECOND)",
        "TABLE(HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))",
        "TABLE(SESSION(TABLE Bid PARTITION BY (item, x), DESCRIPTOR(bidtime), INTERVAL '1' HOUR))",
        "TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '1' DAY, INTERVAL '-8' HOUR)) w",
    ],
)
def test_tvfs_round_trip(tvf: str) -> None:
    round_trips(parse_query(f"SELECT * FROM {tvf} EMIT STREAM"))


# --- errors, positions and scripts ----------------------------------------------------


def test_sql_error_text() -> None:
    err = SqlError("unknown table 'Bids'", 3, 12, "Known tables: Bid")
    assert str(err) == "line 3, column 12: unknown table 'Bids'. Known tables: Bid"
    assert (err.message, err.line, err.col, err.hint) == (
        "unknown table 'Bids'",
        3,
        12,
        "Known tables: Bid",
    )
    assert str(SqlError("no position")) == "no position"
    assert isinstance(err, ValueError)


def test_position_of_nodes() -> None:
    text = "SELECT price\nFROM   Tumble(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE) t"
    query = parse_query(text)
    tvf = only_tvf(text)
    assert position(tvf) == (2, 8)
    assert position(tvf.args["timecol"]) == at(text, "bidtime")
    assert position(tvf.this) == at(text, "Bid")
    assert position(query.expressions[0]) == (1, 8)
    assert position(exp.column("x")) == (None, None)


def test_parse_errors_carry_the_position() -> None:
    assert_error_at("SELECT *\nFROM Bid WHERE price >", ">", "> must be followed by an expression")
    err = error("SELECT * FROM Bid WHERE (price > 1")
    assert (err.line, "expected ')'" in err.message) == (1, True)


@pytest.mark.parametrize(
    ("text", "quote"), [("SELECT 1,\n  'abc", "'"), ('SELECT "abc FROM t', '"')]
)
def test_unclosed_quote(text: str, quote: str) -> None:
    assert_error_at(text, quote, "never closed")


def test_script() -> None:
    statements = parse(
        "CREATE TABLE Bid (bidtime TIMESTAMP, WATERMARK FOR bidtime AS bidtime);\n"
        "CREATE TABLE Out (n BIGINT) WITH ('path' = '/o', 'format' = 'parquet');\n"
        "INSERT INTO Out SELECT COUNT(*) FROM Bid EMIT STREAM;\n"
    )
    assert [type(s) for s in statements] == [exp.Create, exp.Create, exp.Insert]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("DROP TABLE Bid", "Bid"), ("INSERT INTO Out VALUES (1)", "Out"), ("UPDATE t SET a = 1", "t")],
)
def test_statements_headwater_does_not_run(text: str, fragment: str) -> None:
    assert_error_at(text, fragment, "does not run")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("SELECT 1; SELECT 2", "2"), ("INSERT INTO Out SELECT 1", "Out"), ("", None)],
)
def test_parse_query_needs_one_query(text: str, fragment: str | None) -> None:
    with pytest.raises(SqlError, match="exactly one query") as info:
        parse_query(text)
    expected = at(text, fragment) if fragment else (None, None)
    assert (info.value.line, info.value.col) == expected
