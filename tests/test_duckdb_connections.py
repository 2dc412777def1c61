"""The local runner's DuckDB connections: cursors of one database per process,
each with its own registered frames and settings; a connection that registers
Python functions has a database of its own (DuckDB keeps functions in the
database's catalog), so two queries' functions of one name never meet."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

import headwater as hw
from headwater.runners.duckdb_connections import connection


def test_a_connection_sees_only_its_own_frames_and_settings() -> None:
    a, b = connection(), connection()
    a.register("rows", pd.DataFrame({"v": [1, 2]}))
    a.execute("SET TimeZone = 'America/New_York'")
    assert a.sql("SELECT sum(v) FROM rows").fetchone() == (3,)
    with pytest.raises(duckdb.CatalogException):
        b.sql("SELECT * FROM rows")
    assert b.sql("SELECT current_setting('TimeZone')").fetchone() != ("America/New_York",)


def test_functions_of_one_name_stay_apart() -> None:
    a, b = connection(registers_functions=True), connection(registers_functions=True)
    a.create_function("f", lambda x: x + 1, ["BIGINT"], "BIGINT")
    b.create_function("f", lambda x: x + 2, ["BIGINT"], "BIGINT")
    assert (a.sql("SELECT f(1)").fetchone(), b.sql("SELECT f(1)").fetchone()) == ((2,), (3,))


def test_two_queries_with_functions_of_one_name() -> None:
    """Both bound before either runs: each query calls its own ``f``."""
    frame = pd.DataFrame({"s": ["ab", "abc"]})
    lengths = hw.sql.function("BIGINT", ["VARCHAR"])(lambda s: s.str.len())
    shouted = hw.sql.function("BIGINT", ["VARCHAR"])(lambda s: s.str.len() * 10)
    one = hw.sql("SELECT f(s) AS n FROM t", {"t": frame}, functions={"f": lengths})
    two = hw.sql("SELECT f(s) AS n FROM t", {"t": frame}, functions={"f": shouted})
    assert sorted(two.to_pandas().n) == [20, 30]
    assert sorted(one.to_pandas().n) == [2, 3]
