"""Temporal joins: ``FOR SYSTEM_TIME AS OF`` an event time against a versioned stream
(headwater.sql.plan.temporal), against DuckDB.

A random replay of orders and currency rates, both out of order in event time,
some rate versions arriving long after later ones (late versions). Each order
joins the version of its currency valid at its event time: the rate with the
largest ``rate_time <= order_time``, DuckDB's ``ASOF JOIN``. At several
processing times the table view equals that bounded query over the rows arrived,
inner and LEFT, and a late version has retracted joined rows on the way. Without
a primary key (or an ON condition that equates it) the join is refused, positioned.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, one_shuffle_partition, rows

from headwater.sql import read_replay, sql
from headwater.sql.errors import SqlError
from headwater.sql.script import run_script

T0 = 1_700_000_000_000  # epoch ms, a multiple of 10 s
CURRENCIES = ["EUR", "USD", "GBP", "CHF"]
JOIN = "JOIN Rates FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency"


def _lines(frame: pd.DataFrame, time: str) -> list[tuple[int, dict]]:
    out = []
    for row in frame.to_dict("records"):
        ptime = int(row.pop("ptime"))
        row[time] = pd.Timestamp(int(row[time]), unit="ms").isoformat()
        out.append((ptime, {"ptime": ptime, "row": row}))
    return out


def _write(path, lines: list[tuple[int, dict]]) -> str:
    """A replay of ``lines`` with, at each step, the watermark 30 s behind it."""
    out = []
    for ptime in sorted({p for p, _ in lines}):
        out += [line for p, line in lines if p == ptime]
        out.append({"ptime": ptime, "watermark": ptime - 30_000})
    path.write_text("".join(json.dumps(line) + "\n" for line in out))
    return str(path)


def make_replay(tmp, step: int):
    """``(tables, orders, rates)``: both streams as replays (Rates keyed by currency)
    arriving in steps of ``step`` seconds, and their rows with their arrival
    ``ptime`` (ms)."""
    rng = np.random.default_rng(17)
    versions = 6
    rate_time = np.concatenate(  # distinct per currency: one version per time
        [np.sort(rng.choice(120, versions, replace=False)) for _ in CURRENCIES]
    )
    n_rates = len(rate_time)
    delay = np.where(
        rng.random(n_rates) < 0.3, rng.integers(40, 90, n_rates), rng.integers(0, 10, n_rates)
    )
    rates = pd.DataFrame(
        {
            "currency": np.repeat(CURRENCIES, versions),
            "rate": np.round(rng.uniform(0.5, 2.0, n_rates), 2),
            "rate_time": T0 + rate_time * 1_000,
            "ptime": T0 + ((rate_time + delay) // step + 1) * step * 1_000,
        }
    )
    n = 60
    order_time = rng.integers(-10, 130, n)
    orders = pd.DataFrame(
        {
            "id": np.arange(n),
            "currency": rng.choice([*CURRENCIES, "JPY"], n),  # JPY has no rates
            "amount": rng.integers(1, 100, n),
            "order_time": T0 + order_time * 1_000,
            "ptime": T0
            + ((order_time.clip(0) + rng.integers(0, 20, n)) // step + 1) * step * 1_000,
        }
    )
    tables = {
        "Rates": read_replay(
            _write(tmp / "rates.jsonl", _lines(rates, "rate_time")),
            "Rates",
            "rate_time",
            primary_key=["currency"],
        ),
        "Orders": read_replay(
            _write(tmp / "orders.jsonl", _lines(orders, "order_time")), "Orders", "order_time"
        ),
    }
    return tables, orders, rates


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """The replay in steps of 5 s."""
    return make_replay(tmp_path_factory.mktemp("temporal"), 5)


def bounded(query: str, orders: pd.DataFrame, rates: pd.DataFrame, as_of: int) -> pd.DataFrame:
    """``query`` in DuckDB over the orders (``o``) and rates (``r``) arrived by ``as_of``."""

    def arrived(frame: pd.DataFrame, time: str) -> pd.DataFrame:
        frame = frame[frame["ptime"] <= as_of].drop(columns=["ptime"])
        return frame.assign(**{time: pd.to_datetime(frame[time], unit="ms")})

    with duckdb.connect() as con:
        con.register("orders", arrived(orders, "order_time"))
        con.register("rates", arrived(rates, "rate_time"))
        return con.execute(query).df()


ASOF = "ON o.currency = r.currency AND o.order_time >= r.rate_time"
#: (headwater's query, DuckDB's bounded query: the largest rate_time <= order_time)
CASES = {
    "inner": (
        f"SELECT o.id, o.amount, r.rate, r.rate_time FROM Orders AS o {JOIN}",
        f"SELECT o.id, o.amount, r.rate, r.rate_time FROM orders o ASOF JOIN rates r {ASOF}",
    ),
    "left": (
        f"SELECT o.id, o.currency, r.rate FROM Orders o LEFT {JOIN}",
        f"SELECT o.id, o.currency, r.rate FROM orders o ASOF LEFT JOIN rates r {ASOF}",
    ),
    "stars": (
        f"SELECT o.id, r.* FROM Orders o {JOIN} WHERE o.amount > 20",
        f"SELECT o.id, r.* FROM orders o ASOF JOIN rates r {ASOF} WHERE o.amount > 20",
    ),
    "converted per currency": (
        f"""SELECT o.currency, SUM(o.amount * r.rate) AS total, COUNT(*) AS n
        FROM Orders o {JOIN} GROUP BY o.currency""",
        f"""SELECT o.currency, SUM(o.amount * r.rate) AS total, COUNT(*) AS n
        FROM orders o ASOF JOIN rates r {ASOF} GROUP BY o.currency""",
    ),
    "converted per window": (  # one group of every row: the window is not the key
        """SELECT o.window_start, SUM(o.amount * r.rate) AS total
        FROM TABLE(TUMBLE(TABLE Orders, DESCRIPTOR(order_time), INTERVAL '10' SECOND)) o
        JOIN Rates FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency
        GROUP BY o.window_start, o.window_end""",
        f"""SELECT time_bucket(INTERVAL 10 SECOND, o.order_time) AS window_start,
        SUM(o.amount * r.rate) AS total
        FROM orders o ASOF JOIN rates r {ASOF} GROUP BY 1""",
    ),
}


def _as_ofs(orders: pd.DataFrame, rates: pd.DataFrame) -> list[int]:
    steps = np.unique(np.concatenate([orders["ptime"], rates["ptime"]]))
    return [int(steps[len(steps) // 3]), int(steps[2 * len(steps) // 3]), int(steps[-1])]


@pytest.mark.parametrize("case", list(CASES))
def test_each_order_joins_the_version_valid_at_its_event_time(replay, case):
    tables, orders, rates = replay
    query, reference = CASES[case]
    run = sql(query, tables)
    for as_of in _as_ofs(orders, rates):
        expected = bounded(reference, orders, rates, as_of)
        actual = run.to_pandas(as_of=as_of)
        assert len(expected), f"{case}: the reference is empty"
        assert list(actual.columns) == list(expected.columns), case
        assert_same_rows(rows(actual), rows(expected), ordered=False, what=f"{case} @ {as_of}")
    assert not len(run.dead_letters()), "a version and an order are kept whatever their lateness"


def test_a_late_version_retracts_the_rows_it_now_governs(replay):
    """The replay has late versions that govern orders joined before they arrived:
    those joined rows are retracted and joined anew with the late version."""
    tables, orders, rates = replay
    log = sql(CASES["inner"][0], tables).changelog()
    undone = log[log["undo"]]
    assert len(undone), "no late version governed an order joined before it arrived"
    late = rates[rates["ptime"] > rates["rate_time"] + 30_000]  # behind the watermark
    assert set(pd.to_datetime(late["rate_time"], unit="ms")) & set(log["rate_time"])


def test_the_ddl_declares_the_key(replay, tmp_path):
    """``PRIMARY KEY (currency) NOT ENFORCED`` in CREATE TABLE (Flink's DDL) is the
    versioned stream's key: the script gives the rows of the Python run."""
    tables, orders, rates = replay
    _write(tmp_path / "Orders.jsonl", _lines(orders, "order_time"))
    _write(tmp_path / "Rates.jsonl", _lines(rates, "rate_time"))
    script = f"""
    CREATE TABLE Rates (currency STRING, rate DOUBLE, rate_time TIMESTAMP(3),
      PRIMARY KEY (currency) NOT ENFORCED, WATERMARK FOR rate_time AS rate_time)
      WITH ('format' = 'replay', 'path' = '{tmp_path / "Rates.jsonl"}');
    CREATE TABLE Orders (id BIGINT, currency STRING, amount BIGINT, order_time TIMESTAMP(3),
      WATERMARK FOR order_time AS order_time)
      WITH ('format' = 'replay', 'path' = '{tmp_path / "Orders.jsonl"}');
    {CASES["left"][0]};
    """
    (result,) = list(run_script(script))
    expected = sql(CASES["left"][0], tables).to_pandas()
    assert len(expected)
    assert_same_rows(rows(result), rows(expected), ordered=False, what="script")


REFUSED = {
    "no primary key": (
        "SELECT o.id FROM Orders o JOIN Orders FOR SYSTEM_TIME AS OF o.order_time AS p "
        "ON o.id = p.id",
        "no primary key",
    ),
    "the key not equated": (
        "SELECT o.id FROM Orders o JOIN Rates FOR SYSTEM_TIME AS OF o.order_time "
        "AS r ON o.amount > r.rate",
        "does not equate r.currency",
    ),
    "a RIGHT temporal join": (f"SELECT o.id FROM Orders o RIGHT {JOIN}", "inner or LEFT"),
    "AS OF the versioned side": (
        "SELECT o.id FROM Orders o JOIN Rates FOR SYSTEM_TIME AS OF r.rate_time "
        "AS r ON o.currency = r.currency",
        "reads the versioned table",
    ),
    "EMIT AFTER WATERMARK": (
        f"SELECT o.id FROM Orders o {JOIN} EMIT AFTER WATERMARK",
        "not bounded",
    ),
    "SELECT * of two currencies": (
        f"SELECT * FROM Orders o {JOIN}",
        "two columns named 'currency'",
    ),
    "o.* and r.*": (f"SELECT o.*, r.* FROM Orders o {JOIN}", "two columns named 'currency'"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_cannot_be_read_exactly_is_refused_positioned(replay, case):
    query, message = REFUSED[case]
    with pytest.raises(SqlError) as info:
        sql(query, replay[0])
    assert message in info.value.message, str(info.value)
    assert info.value.line == 1 and info.value.col is not None, str(info.value)
    assert info.value.hint, str(info.value)


def test_explain_shows_the_versions_and_the_key(replay):
    text = sql(CASES["left"][0], replay[0]).explain()
    assert 'LEAD("rate_time") OVER (PARTITION BY "currency" ORDER BY "rate_time", "rate")' in text
    assert "maintenance: key orders.currency = rates.currency" in text
    assert "state grows with the distinct values" in text


@pytest.mark.spark
def test_on_spark_the_table_views_are_the_bounded_query(spark, tmp_path):
    """One Spark run of the LEFT join (a micro-batch per step of 30 s, few): its table
    view at each processing time, a late version retracting joined rows on the way."""
    from headwater.sql.execute.spark import SparkSqlQuery

    tables, orders, rates = make_replay(tmp_path, 30)
    query, reference = CASES["left"]
    with one_shuffle_partition(spark):
        run = SparkSqlQuery(query, tables, spark=spark).run(None)
    for as_of in _as_ofs(orders, rates):
        expected = bounded(reference, orders, rates, as_of)
        assert_same_rows(
            rows(run.table(as_of)), rows(expected), ordered=False, what=f"spark @ {as_of}"
        )
    assert run.changes()["undo"].any(), "no late version governed an order joined before it"


DDL = (
    "CREATE TABLE Rates (currency STRING, rate DOUBLE, rate_time TIMESTAMP(3){key}) "
    "WITH ('format' = 'replay', 'path' = 'x')"
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (", PRIMARY KEY (currency) NOT ENFORCED", ("currency",)),
        (", PRIMARY KEY (currency, rate) NOT ENFORCED", ("currency", "rate")),
        (" PRIMARY KEY NOT ENFORCED", ("rate_time",)),
        ("", ()),
    ],
)
def test_the_ddl_reads_the_primary_key(key, expected):
    from headwater.sql.parse.ddl import source_def
    from headwater.sql.parse.dialect import parse

    (create,) = parse(DDL.format(key=key))
    assert source_def(create).primary_key == expected


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (", PRIMARY KEY (cur) NOT ENFORCED", "PRIMARY KEY names 'cur'"),
        (", PRIMARY KEY (currency) NOT ENFORCED, PRIMARY KEY (rate) NOT ENFORCED", "at most one"),
    ],
)
def test_a_wrong_primary_key_is_refused_positioned(key, message):
    from headwater.sql.parse.ddl import source_def
    from headwater.sql.parse.dialect import parse

    (create,) = parse(DDL.format(key=key))
    with pytest.raises(SqlError) as info:
        source_def(create)
    assert message in info.value.message
    assert info.value.line == 1 and info.value.col is not None, str(info.value)


def test_the_command_line_declares_the_key(capsys):
    """``--primary-key`` keys a replayed table; without it the join is refused, and a
    key for a table that is not replayed is an error naming the flag."""
    from headwater import cli

    query = (
        "SELECT order_id, r.conversion_rate FROM orders o JOIN currency_rates "
        "FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency"
    )
    docs = Path(__file__).resolve().parents[2] / "docs" / "sql"
    replays = [
        *("--replay", f"orders={docs / 'orders.jsonl'}", "--event-time", "orders.order_time"),
        *("--replay", f"currency_rates={docs / 'rates.jsonl'}"),
        *("--event-time", "currency_rates.update_time", "--format", "csv"),
    ]
    assert cli.main(["sql", query, *replays, "--primary-key", "currency_rates=currency"]) == 0
    out, _ = capsys.readouterr()
    assert sorted(out.splitlines()[1:]) == ["1,1.19", "2,1.0", "4,1.25"]
    assert cli.main(["sql", query, *replays]) == 2
    assert "--primary-key currency_rates=col" in capsys.readouterr().err
    assert cli.main(["sql", query, *replays, "--primary-key", "rates=currency"]) == 2
    assert "--primary-key rates=...: no --replay rates=FILE" in capsys.readouterr().err


SINK = (
    "CREATE TABLE Totals (window_start TIMESTAMP, window_end TIMESTAMP, total DOUBLE{key}) "
    "WITH ({options})"
)
KAFKA = "'connector' = 'upsert-kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'h:1'"
DELTA = "'connector' = 'delta', 'path' = 'x'"
PK = ", PRIMARY KEY (window_start, window_end) NOT ENFORCED"


@pytest.mark.parametrize("options", [KAFKA, DELTA])
def test_an_upsert_sinks_key_is_its_primary_key_or_key_fields(options):
    """Flink's upsert-kafka DDL keys the sink by its PRIMARY KEY; 'key.fields' keys it
    too; both, differing, is an error."""
    from headwater.sql.execute.sources import make_sink
    from headwater.sql.parse.ddl import source_def
    from headwater.sql.parse.dialect import parse

    def sink(key: str, extra: str = ""):
        (create,) = parse(SINK.format(key=key, options=options + extra))
        return make_sink(source_def(create))

    expected = ["window_start", "window_end"]
    assert list(sink(PK).key) == expected
    assert list(sink("", ", 'key.fields' = 'window_start;window_end'").key) == expected
    assert list(sink(PK, ", 'key.fields' = 'window_start;window_end'").key) == expected
    with pytest.raises(SqlError, match="is not its PRIMARY KEY"):
        sink(PK, ", 'key.fields' = 'window_start'")
