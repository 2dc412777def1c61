"""Bounded queries on random tables against a reference written by hand.

Seeded random bid (and ask) tables: times on and between window boundaries, a few
keys, repeated prices, NULLs in every column. Random window sizes, slides and
offsets; tumble and hop aggregates with HAVING, a window Top-N, window joins (inner
and left), in both TVF spellings. headwater's bounded result (DuckDB locally; one
native Spark plan on Spark, for a few seeds) must equal DuckDB running the same
query over windows assigned by hand: ``time_bucket`` with an explicit origin for a
tumbling window, ``generate_series`` of window starts for a hopping one. A row of
NULL time is in no window.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from sql_helpers import assert_same_rows, rows

from headwater.sql import sql

SEEDS = range(10)
SPARK_SEEDS = (3, 8)
BASE = pd.Timestamp("2024-01-01 10:00:00")
KEYS = ["A", "B", "C", "D"]


def random_table(rng: np.random.Generator, time_column: str, n: int) -> pd.DataFrame:
    """``time_column``, ``price`` (whole numbers, repeated), ``item``; ~8% NULLs each.
    A third of the times fall on whole minutes (window boundaries)."""
    seconds = rng.integers(0, 3600, n)
    on_minute = rng.random(n) < 0.35
    seconds = np.where(on_minute, seconds // 60 * 60, seconds)
    times = pd.Series(BASE + pd.to_timedelta(seconds, unit="s"))
    times[rng.random(n) < 0.08] = pd.NaT
    price = rng.integers(1, 15, n).astype("float64")
    price[rng.random(n) < 0.08] = np.nan
    item = pd.Series(rng.choice(KEYS, n), dtype=object)
    item[rng.random(n) < 0.08] = None
    return pd.DataFrame({time_column: times.astype("datetime64[ns]"), "price": price, "item": item})


@dataclass(frozen=True)
class Windows:
    """A tumbling (``slide`` None) or hopping window, in seconds."""

    size: int
    slide: int | None
    offset: int

    def tvf(self, table: str, time_column: str, flink: bool) -> str:
        def iv(s: int) -> str:
            return f"INTERVAL '{s}' SECOND"

        data, desc = (f"TABLE {table}", f"DESCRIPTOR({time_column})")
        if flink:
            if self.slide is None:
                return f"TABLE(TUMBLE({data}, {desc}, {iv(self.size)}, {iv(self.offset)}))"
            args = f"{iv(self.slide)}, {iv(self.size)}, {iv(self.offset)}"
            return f"TABLE(HOP({data}, {desc}, {args}))"
        args = f"data => TABLE({table}), timecol => {desc}, dur => {iv(self.size)}"
        if self.slide is not None:
            args += f", hopsize => {iv(self.slide)}"
        kind = "Tumble" if self.slide is None else "Hop"
        return f"{kind}({args}, offset => {iv(self.offset)})"

    def assign(self, table: str, time_column: str) -> str:
        """Reference: ``table`` with ``wstart``/``wend`` assigned by hand (DuckDB)."""
        origin = f"TIMESTAMP '1970-01-01 00:00:00' + INTERVAL '{self.offset} seconds'"
        t = f"r.{time_column}"
        if self.slide is None:
            start = f"time_bucket(INTERVAL '{self.size} seconds', {t}, {origin})"
            return (
                f"SELECT r.*, {start} AS wstart, {start} + INTERVAL '{self.size} seconds' AS wend "
                f"FROM {table} r WHERE {t} IS NOT NULL"
            )
        last = f"time_bucket(INTERVAL '{self.slide} seconds', {t}, {origin})"
        back = (-(-self.size // self.slide) - 1) * self.slide
        series = (
            f"generate_series({last} - INTERVAL '{back} seconds', {last}, "
            f"INTERVAL '{self.slide} seconds')"
        )
        return (
            f"SELECT r.*, g.s AS wstart, g.s + INTERVAL '{self.size} seconds' AS wend "
            f"FROM {table} r, unnest({series}) AS g(s) "
            f"WHERE g.s + INTERVAL '{self.size} seconds' > {t}"
        )


def random_windows(rng: np.random.Generator, hop: bool) -> Windows:
    if not hop:
        size = int(rng.choice([60, 120, 300, 420, 600, 900]))
        return Windows(size, None, int(rng.choice([0, 0, int(rng.integers(1, size))])))
    slide = int(rng.choice([60, 120, 180, 300]))
    # multiples of the slide, one that is not, and one smaller than it (gaps)
    size = int(rng.choice([slide, 2 * slide, 3 * slide, 2 * slide + 60, max(30, slide - 60)]))
    return Windows(size, slide, int(rng.choice([0, int(rng.integers(1, slide))])))


@dataclass(frozen=True)
class Case:
    """One random query: headwater's text and the reference's."""

    name: str
    query: str
    reference: str
    tables: dict


def make_case(seed: int, shape: str) -> Case:
    rng = np.random.default_rng([seed, len(shape)])
    bid = random_table(rng, "bidtime", int(rng.integers(40, 120)))
    hop = shape == "hop_aggregate" or (shape == "top_n" and rng.random() < 0.5)
    w = random_windows(rng, hop)
    flink = bool(rng.random() < 0.5)
    ws, we = ("window_start", "window_end") if flink else ("wstart", "wend")
    tvf = w.tvf("Bid", "bidtime", flink)
    ref_bid = w.assign("Bid", "bidtime")
    tables = {"Bid": bid}
    if shape == "tumble_aggregate":
        least = int(rng.integers(1, 4))
        aggregates = (
            "COUNT(*) AS n, COUNT(price) AS priced, SUM(price) AS total, MIN(price) AS lo, "
            "MAX(price) AS hi, AVG(price) AS mean, COUNT(DISTINCT price) AS prices"
        )
        query = (
            f"SELECT {ws}, {we}, item, {aggregates} FROM {tvf} "
            f"GROUP BY {ws}, {we}, item HAVING COUNT(*) >= {least}"
        )
        reference = (
            f"SELECT wstart, wend, item, {aggregates} FROM ({ref_bid}) w "
            f"GROUP BY wstart, wend, item HAVING COUNT(*) >= {least}"
        )
    elif shape == "hop_aggregate":
        above = int(rng.integers(0, 30))
        aggregates = "COUNT(*) AS n, SUM(price) AS total, MAX(price) AS hi, AVG(price) AS mean"
        query = (
            f"SELECT {ws}, {we}, {aggregates} FROM {tvf} "
            f"GROUP BY {ws}, {we} HAVING SUM(price) > {above}"
        )
        reference = (
            f"SELECT wstart, wend, {aggregates} FROM ({ref_bid}) w "
            f"GROUP BY wstart, wend HAVING SUM(price) > {above}"
        )
    elif shape == "top_n":
        n = int(rng.integers(1, 4))
        # headwater's SQL orders NULLs as the smallest values (sqlglot's default dialect)
        order = "price DESC, bidtime, item"
        query = (
            f"SELECT {ws}, {we}, bidtime, price, item, rn FROM (SELECT *, ROW_NUMBER() OVER "
            f"(PARTITION BY {ws}, {we} ORDER BY {order}) AS rn FROM {tvf}) t WHERE rn <= {n}"
        )
        ref_order = "price DESC NULLS LAST, bidtime NULLS FIRST, item NULLS FIRST"
        reference = (
            f"SELECT wstart, wend, bidtime, price, item, rn FROM (SELECT *, ROW_NUMBER() OVER "
            f"(PARTITION BY wstart, wend ORDER BY {ref_order}) AS rn FROM ({ref_bid}) w) t "
            f"WHERE rn <= {n}"
        )
    else:  # a window join, inner or left
        ask = random_table(rng, "asktime", int(rng.integers(20, 60)))
        tables["Ask"] = ask
        kind = "LEFT" if shape == "left_join" else "INNER"
        ask_tvf = w.tvf("Ask", "asktime", flink)
        on = f"B.{ws} = A.{ws} AND B.{we} = A.{we} AND B.item = A.item"
        query = (
            f"SELECT B.{ws}, B.{we}, B.item, B.bidtime, B.price AS bid, A.asktime, "
            f"A.price AS ask FROM {tvf} B {kind} JOIN {ask_tvf} A ON {on}"
        )
        reference = (
            "SELECT B.wstart, B.wend, B.item, B.bidtime, B.price AS bid, A.asktime, "
            f"A.price AS ask FROM ({ref_bid}) B {kind} JOIN ({w.assign('Ask', 'asktime')}) A "
            "ON B.wstart = A.wstart AND B.wend = A.wend AND B.item = A.item"
        )
    return Case(f"{shape}-{seed}", query, reference, tables)


SHAPES = ("tumble_aggregate", "hop_aggregate", "top_n", "join", "left_join")


def reference_rows(case: Case) -> list[tuple]:
    """DuckDB over the tables as Arrow (NaN is NULL, as a pandas user means it)."""
    con = duckdb.connect()
    for name, frame in case.tables.items():
        con.register(name, pa.Table.from_pandas(frame, preserve_index=False))
    return rows(con.sql(case.reference).df())


def test_the_tables_have_what_the_test_needs() -> None:
    """Guard the generator: NULLs in every column, times on window boundaries."""
    frame = pd.concat([random_table(np.random.default_rng(s), "bidtime", 80) for s in SEEDS])
    assert frame.isna().any().all()
    assert (frame["bidtime"].dt.second == 0).mean() > 0.3
    assert frame.groupby(["item", "price"]).size().max() > 1


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_local_equals_the_reference(seed: int, shape: str) -> None:
    case = make_case(seed, shape)
    actual = rows(sql(case.query, case.tables).to_pandas())
    expected = reference_rows(case)
    assert_same_rows(actual, expected, ordered=False, what=f"{case.name}: {case.query}")


@pytest.mark.spark
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", SPARK_SEEDS)
def test_spark_equals_the_reference(spark, seed: int, shape: str) -> None:
    from headwater.sql.execute.spark import SparkSqlQuery

    case = make_case(seed, shape)
    actual = rows(SparkSqlQuery(case.query, case.tables, spark=spark).to_pandas())
    expected = reference_rows(case)
    assert_same_rows(actual, expected, ordered=False, what=f"{case.name}: {case.query}")
