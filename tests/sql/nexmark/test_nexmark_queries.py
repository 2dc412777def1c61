"""The Flink NEXMark queries (queries/q*.sql) on headwater's local runner.

Each query runs as a script (queries/ddl.sql declares the three sources as replay
files of a small generated stream, out-of-order arrival, exact watermarks) into a
table sink kept in DuckDB; its final table must equal the bounded query over the
same rows in DuckDB (REFERENCE, written with Flink's meaning). A query headwater
refuses is an xfail, strict and raising SqlError only, with headwater's message:
the day it runs, the test fails until its reference is written here. A query that
runs but differs from Flink's meaning is an xfail raising AssertionError, with the
divergence; its stream must still equal the bounded query with headwater's meaning
(OWN_MEANING), else it fails. The session ends with a summary (conftest.py), and
docs/sql.md's NEXMark table must be this module's status of each query.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, rows
from sqlglot import exp

from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write
from headwater.sql import sql
from headwater.sql.errors import SqlError
from headwater.sql.execute.aggregate_local import describe_maintenance
from headwater.sql.execute.local import result_types, run_stream
from headwater.sql.execute.sink_types import fit_to_sink
from headwater.sql.execute.sources import is_sink, local_source
from headwater.sql.parse.ddl import source_def
from headwater.sql.parse.dialect import parse
from headwater.sql.plan.catalog import PTIME
from headwater.sql.plan.functions import create_function
from headwater.sql.script import by_position, run_script, with_views

QUERIES = Path(__file__).parent / "queries"
#: A few thousand events over 10 s of event time, arriving up to 2 s late.
CONFIG = NexmarkConfig(events=2000, seed=1, first_event_rate=200, out_of_order_ms=2000)
STEP_MS = 1000

#: query -> (headwater's SqlError message, why): what headwater refuses today.
REFUSED = {
    "q6": (
        "A.id: no table or alias A here",
        "Flink's text reads A.id, A.seller, B.price outside the subquery that names A and B "
        "(invalid SQL; Flink does not run q6 either)",
    ),
}
#: query -> the divergence from Flink's meaning of a query headwater runs.
DIVERGES: dict[str, str] = {}
_CHANNEL = "(&|^)channel_id=([^&]*)"
_DAY = "strftime(\"dateTime\", '%Y-%m-%d')"
#: The bids of each auction while it is open (q4, q9), ``what`` selected.
_WINNING = """SELECT {what} FROM auction A, bid B
    WHERE A.id = B.auction AND B."dateTime" BETWEEN A."dateTime" AND A.expires"""
_RANKS = ("price < 10000", "price >= 10000 AND price < 1000000", "price >= 1000000")


def _ranked(aggregate: str) -> str:
    """``aggregate`` over all bids, then over each price rank (q15-q17)."""
    return ", ".join([aggregate] + [f"{aggregate} FILTER (WHERE {r})" for r in _RANKS])


_BY_RANK = f"{_ranked('count(*)')}, {_ranked('count(DISTINCT bidder)')}, " + _ranked(
    "count(DISTINCT auction)"
)
#: The bounded queries in DuckDB, with Flink's meaning (columns in the sink's order).
REFERENCE = {
    "q15": f"SELECT {_DAY}, {_BY_RANK} FROM bid GROUP BY {_DAY}",
    "q16": f"SELECT channel, {_DAY}, max(strftime(\"dateTime\", '%H:%M')), {_BY_RANK} "
    f"FROM bid GROUP BY channel, {_DAY}",
    # Flink's AVG of a BIGINT is a BIGINT (the quotient truncated)
    "q17": f"SELECT auction, {_DAY}, {_ranked('count(*)')}, min(price), max(price), "
    f"CAST(trunc(avg(price)) AS BIGINT), sum(price) FROM bid GROUP BY auction, {_DAY}",
    "q0": 'SELECT auction, bidder, price, "dateTime", extra FROM bid',
    "q1": 'SELECT auction, bidder, 0.908 * price, "dateTime", extra FROM bid',
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q8": """SELECT P.id, P.name, P.starttime
        FROM (SELECT DISTINCT id, name, time_bucket(INTERVAL 10 SECOND, "dateTime") AS starttime
              FROM person) P
        JOIN (SELECT DISTINCT seller, time_bucket(INTERVAL 10 SECOND, "dateTime") AS starttime
              FROM auction) A
        ON P.id = A.seller AND P.starttime = A.starttime""",
    "q18": """SELECT auction, bidder, price, channel, url, "dateTime", extra
        FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY "dateTime" DESC)
              AS rank_number FROM bid)
        WHERE rank_number <= 1""",
    "q19": """SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC)
        AS rank_number FROM bid) WHERE rank_number <= 10""",
    "q3": "SELECT P.name, P.city, P.state, A.id FROM auction A JOIN person P ON A.seller = P.id "
    "WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')",
    "q10": 'SELECT auction, bidder, price, "dateTime", extra, strftime("dateTime", \'%Y-%m-%d\'), '
    "strftime(\"dateTime\", '%H:%M') FROM bid",
    "q21": f"""SELECT auction, bidder, price, channel,
        CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
             WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
             ELSE CASE WHEN regexp_matches(url, '{_CHANNEL}')
                       THEN regexp_extract(url, '{_CHANNEL}', 2) END END
        FROM bid
        WHERE regexp_matches(url, '{_CHANNEL}')
           OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    # sessions of each bidder: a bid within 10 s of the bidder's previous one (10 s
    # after it included, as Flink's and Spark's sessions merge windows that touch)
    # joins its session, which ends 10 s after its last bid
    "q11": """WITH marked AS (
            SELECT bidder, "dateTime",
                CASE WHEN lag("dateTime") OVER (PARTITION BY bidder ORDER BY "dateTime")
                          >= "dateTime" - INTERVAL 10 SECOND THEN 0 ELSE 1 END AS opens
            FROM bid),
        sessions AS (
            SELECT bidder, "dateTime", sum(opens) OVER (PARTITION BY bidder ORDER BY "dateTime"
                ROWS UNBOUNDED PRECEDING) AS session FROM marked)
        SELECT bidder, count(*), min("dateTime"), max("dateTime") + INTERVAL 10 SECOND
        FROM sessions GROUP BY bidder, session""",
    # Flink's AVG of a BIGINT is a BIGINT; each auction's winning price, per category
    "q4": f"""SELECT category, CAST(trunc(avg(final)) AS BIGINT)
        FROM ({_WINNING.format(what="max(B.price) AS final, A.category")}
              GROUP BY A.id, A.category)
        GROUP BY category""",
    # Hop windows of 10 s every 2 s: each bid is in the 5 windows starting at its
    # 2-second bucket and the 4 before it
    "q5": """WITH hop AS (
            SELECT auction, time_bucket(INTERVAL 2 SECOND, "dateTime")
                            - to_seconds(2 * k) AS starttime
            FROM bid, range(5) AS r(k)),
        counts AS (SELECT auction, starttime, count(*) AS num FROM hop GROUP BY ALL)
        SELECT C.auction, C.num
        FROM counts C
        JOIN (SELECT starttime, max(num) AS maxn FROM counts GROUP BY starttime) M
        ON C.starttime = M.starttime AND C.num >= M.maxn""",
    "q7": """SELECT B.auction, B.price, B.bidder, B."dateTime", B.extra
        FROM bid B
        JOIN (SELECT max(price) AS maxprice,
                     time_bucket(INTERVAL 10 SECOND, "dateTime") + INTERVAL 10 SECOND AS "dateTime"
              FROM bid GROUP BY 2) B1
        ON B.price = B1.maxprice
        WHERE B."dateTime" BETWEEN B1."dateTime" - INTERVAL 10 SECOND AND B1."dateTime"
    """,
    "q9": f"""SELECT id, itemName, description, initialBid, reserve, "dateTime", expires,
            seller, category, extra, auction, bidder, price, bid_dateTime, bid_extra
        FROM ({
        _WINNING.format(
            what="A.*, B.auction, B.bidder, B.price, "
            'B."dateTime" AS bid_dateTime, B.extra AS bid_extra, ROW_NUMBER() OVER '
            '(PARTITION BY A.id ORDER BY B.price DESC, B."dateTime" ASC) AS rownum'
        )
    })
        WHERE rownum <= 1""",
    "q20": """SELECT auction, bidder, price, channel, url, B."dateTime" AS bid_dateTime,
            B.extra AS bid_extra, itemName, description, initialBid, reserve,
            A."dateTime" AS auction_dateTime, expires, seller, category, A.extra AS auction_extra
        FROM bid B JOIN auction A ON B.auction = A.id
        WHERE A.category = 10""",
    "q23": """SELECT bidder, price, channel, url, B.extra, P.id, name, emailAddress,
            creditCard, city, state, P.extra, itemName, description, initialBid, reserve,
            A."dateTime", expires, seller, category, A.extra
        FROM bid B JOIN person P ON P.id = B.bidder JOIN auction A ON A.seller = B.bidder""",
    "q22": "SELECT auction, bidder, price, channel, string_split(url, '/')[4], "
    "string_split(url, '/')[5], string_split(url, '/')[6] FROM bid",
    # processing-time windows: each bid's p_time is the step it arrives at (its
    # replay line's ptime, bid_arrival)
    "q12": """SELECT bidder, count(*), time_bucket(INTERVAL 10 SECOND, p_time),
            time_bucket(INTERVAL 10 SECOND, p_time) + INTERVAL 10 SECOND
        FROM bid_arrival GROUP BY ALL""",
    # a lookup join against the bounded side input: the plain join
    "q13": 'SELECT B.auction, B.bidder, B.price, B."dateTime", S."value" '
    "FROM bid B JOIN side_input S ON B.auction % 10000 = S.key",
    # count_char(extra, 'c'): the occurrences of 'c' in extra
    "q14": """SELECT auction, bidder, 0.908 * price,
            CASE WHEN hour("dateTime") BETWEEN 8 AND 18 THEN 'dayTime'
                 WHEN hour("dateTime") <= 6 OR hour("dateTime") >= 20 THEN 'nightTime'
                 ELSE 'otherTime' END,
            "dateTime", extra, length(extra) - length(replace(extra, 'c', ''))
        FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
}
#: query -> the bounded query with headwater's meaning, where it differs from
#: Flink's (DIVERGES): the stream must equal it (a failure, not an xfail).
OWN_MEANING: dict[str, str] = {}
#: What each query did, for the summary (conftest.py prints it).
STATUS: dict[str, str] = {}


def _param(name: str):
    if name in REFUSED:
        message, why = REFUSED[name]
        mark = pytest.mark.xfail(strict=True, raises=SqlError, reason=f"{why}: {message}")
        return pytest.param(name, marks=mark, id=name)
    if name in DIVERGES:
        mark = pytest.mark.xfail(strict=True, raises=AssertionError, reason=DIVERGES[name])
        return pytest.param(name, marks=mark, id=name)
    return pytest.param(name, id=name)


NAMES = [f"q{i}" for i in range(24)]


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """The generated events and the directory of their replay files."""
    data = tmp_path_factory.mktemp("nexmark")
    events = generate(CONFIG)
    write(events, data, ["replay"], step_ms=STEP_MS)
    write_side_input(data)
    return events, data


def write_side_input(data: Path) -> None:
    """q13's bounded side input (side_input.csv): a value for each key of 0..9999."""
    keys = np.arange(10_000)
    pd.DataFrame({"key": keys, "value": (keys * 7).astype(str)}).to_csv(
        data / "side_input.csv", index=False
    )


def script(name: str, data: Path, sink: Path) -> str:
    ddl = (QUERIES / "ddl.sql").read_text()
    text = ddl + "\n" + (QUERIES / f"{name}.sql").read_text()
    return text.replace("${DATA}", str(data)).replace("${SINK}", str(sink))


def insert_query(
    name: str, data: Path, text: str | None = None, source=local_source
) -> tuple[exp.Expression, dict, list]:
    """The query of ``name``'s INSERT, as run_script binds it, its tables and functions;
    ``text``: another script of it, ``source``: how its sources are read."""
    tables, columns, views, functions, query = {}, {}, {}, [], None
    for statement in parse(text or script(name, data, data / "unused.duckdb")):
        statement = with_views(statement, views)
        if isinstance(statement, exp.Create) and statement.kind == "VIEW":
            views[statement.this.name.lower()] = statement.expression
        elif isinstance(statement, exp.Create) and statement.kind == "FUNCTION":
            functions.append(create_function(statement))
        elif isinstance(statement, exp.Create):
            d = source_def(statement)
            if is_sink(d):
                columns[d.name.lower()] = d.columns
            else:
                tables[d.name] = source(d)
        elif isinstance(statement, exp.Insert):
            sink = statement.this.name
            query = by_position(statement.expression, list(columns[sink.lower()]))
            bound = sql(query, tables, functions=functions).plan
            query = fit_to_sink(query, result_types(bound), columns[sink.lower()], sink)
    assert query is not None, name
    return query, tables, functions


def run_query(name: str, data: Path, sink: Path) -> tuple[pd.DataFrame, list]:
    """The query's final sink table, and the dead letters of its run."""
    letters: list = []
    list(run_script(script(name, data, sink), dead_letters=lambda q: _collect(letters)))
    with duckdb.connect(str(sink)) as con:
        table = con.execute(f"SELECT * FROM nexmark_{name}").df()
    # The sink keeps each distinct row once with its multiplicity (__n), keyed by
    # a hash (__row), stamped with the batch that wrote it last (batch_id).
    values = table.drop(columns=["__row", "__n", "batch_id"])
    return values.loc[values.index.repeat(table["__n"])].reset_index(drop=True), letters


def _collect(letters: list):
    def sink(batch, batch_id):
        if len(batch):
            letters.append(batch)

    return sink


def reference(name: str, events, query: str | None = None, data: Path | None = None):
    """The bounded query (default: REFERENCE's, Flink's meaning) over the events;
    with ``data``, also over its side input and the bids with their arrival time
    (``bid_arrival``: each bid of bid.jsonl with its line's ptime as p_time)."""
    with duckdb.connect() as con:
        for table, rows_ in events.tables.items():
            con.register(table, rows_)
        if data is not None:
            con.register("side_input", pd.read_csv(data / "side_input.csv", dtype={"value": str}))
            arrival = con.execute(
                "SELECT row.bidder AS bidder, epoch_ms(ptime) AS p_time FROM read_json(?, "
                "columns={'ptime': 'BIGINT', 'row': 'STRUCT(bidder BIGINT)'}) "
                "WHERE row IS NOT NULL",
                [str(data / "bid.jsonl")],
            ).df()
            con.register("bid_arrival", arrival)
        return con.execute(query or REFERENCE[name]).df()


@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_query(name, stream, tmp_path):
    events, data = stream
    try:
        actual, letters = run_query(name, data, tmp_path / f"{name}.duckdb")
    except SqlError as exc:
        STATUS[name] = f"refused: {str(exc).splitlines()[0]}"
        # Refused for the recorded reason (another one fails the test).
        assert name in REFUSED and REFUSED[name][0] in str(exc), str(exc)
        raise
    assert not letters, f"{name}: rows dropped although the watermarks are exact"
    expected = reference(name, events, data=data)
    assert len(expected), f"{name}: the reference finds no rows; the data set is too small"
    try:
        assert_flinks_meaning(name, actual, expected, events)
    except AssertionError:
        own = "equal to the bounded query with headwater's meaning; " if name in OWN_MEANING else ""
        STATUS[name] = f"ran, {len(actual)} rows, {own}DIFFERS from Flink's meaning"
        raise
    STATUS[name] = f"ran, {len(actual)} rows, equal to the bounded query in DuckDB"


def assert_flinks_meaning(name: str, actual, expected, events) -> None:
    """``actual`` (the stream's final table) equals ``expected`` (the bounded query
    with Flink's meaning); where headwater's meaning differs (OWN_MEANING), it must
    equal that bounded query first, or the test fails rather than xfails."""
    if name in OWN_MEANING:
        own = reference(name, events, OWN_MEANING[name])
        try:
            assert_same_rows(rows(actual), rows(own), ordered=False, what=name)
        except AssertionError as exc:
            pytest.fail(f"{name}: the stream differs from the bounded query: {exc}")
    assert_same_rows(rows(actual), rows(expected), ordered=False, what=name)


def test_q4_in_stages_equals_the_bounded_query_at_every_step(stream):
    """q4 runs in two stages (the auction's highest bid, then the category's
    average): its table view equals the bounded query over the rows arrived at
    every step, and its changelog the one-group run's (but for ``ver``, numbered
    per category, and the group columns)."""
    events, data = stream
    query, tables, functions = insert_query("q4", data)
    plan = sql(query, tables, functions=functions).plan
    assert [(s.number, s.key.kind.name) for s in plan.stages] == [(1, "COLUMNS"), (2, "COLUMNS")]
    staged = run_stream(plan)
    ptimes = sorted({int(p) for p in staged.changelog["ptime"]})
    assert len(ptimes) > 3, "q4 changes at too few steps to check them"
    for as_of in ptimes:
        with duckdb.connect() as con:
            for name, table in tables.items():
                frame = table.frame
                con.register(name, frame[frame[PTIME] <= as_of].drop(columns=[PTIME]))
            expected = rows(con.execute(REFERENCE["q4"]).df())
        assert_same_rows(rows(staged.table(as_of)), expected, False, f"q4 at {as_of}")
    one_group = run_stream(dataclasses.replace(plan, stages=(), first_stage=None))
    drop = ["__gk", "__gs", "__ge", "ver"]
    assert sorted(rows(staged.changelog.drop(columns=drop)), key=repr) == sorted(
        rows(one_group.changelog.drop(columns=drop)), key=repr
    )


def test_every_query_is_classified():
    assert sorted(QUERIES.glob("q*.sql")) == sorted(QUERIES / f"{n}.sql" for n in NAMES)
    for name in NAMES:
        known = name in REFERENCE or name in REFUSED
        assert known, f"{name}: no reference and not refused"


# ------------------------------------------------------------------ docs/sql.md

DOC = Path(__file__).parents[3] / "docs" / "sql.md"
_MARKS = ("<!-- nexmark-status: generated by tests/sql/nexmark/test_nexmark_queries.py -->",
          "<!-- /nexmark-status -->")  # fmt: skip


def status_row(name: str, data: Path) -> str:
    """One query's line of the doc table: what the tests above assert of it, and
    its plan (combining operators, maintenance key and state)."""
    try:
        query, tables, functions = insert_query(name, data)
        plan = sql(query, tables, functions=functions).plan
    except SqlError as exc:
        reason = REFUSED[name][1]
        message = str(exc).splitlines()[0].replace("|", "\\|")
        return f"| {name} | refused | {reason}: {message} | | |"
    if name in DIVERGES:
        status, why = "runs, equals the bounded query", f"differs from Flink: {DIVERGES[name]}"
    else:
        status, why = "runs, equals the bounded query (Flink's meaning)", ""
    operators = ", ".join(plan.key.operators) or "none (row by row)"
    return f"| {name} | {status} | {why} | {operators} | {describe_maintenance(plan)} |"


def status_table(data: Path) -> str:
    head = (
        "| query | status | why | combining operators | maintenance and state |\n"
        "|---|---|---|---|---|"
    )
    return "\n".join([head, *(status_row(n, data) for n in NAMES)])


def test_the_doc_table_is_the_status(stream):
    """docs/sql.md's NEXMark table is this module's status of each query (the xfails
    and references above); to update it, paste the table this prints."""
    text = DOC.read_text()
    assert _MARKS[0] in text and _MARKS[1] in text, f"{DOC}: the NEXMark table's marks"
    documented = text.split(_MARKS[0])[1].split(_MARKS[1])[0].strip()
    expected = status_table(stream[1])
    assert documented == expected, f"docs/sql.md's NEXMark table should read:\n{expected}"
