"""DuckDB connections of the local runner and the SQL stages that evaluate with DuckDB.

Opening a DuckDB database builds its catalog and buffer manager: milliseconds per
call, paid several times by every query the local runner plans and runs. A cursor
of a database already open costs almost nothing and keeps its own temporary views,
registered frames and settings (``SET TimeZone``), so each caller gets a cursor of
one in-memory database per process. Python functions are the exception: DuckDB
keeps them in the database's catalog, not the cursor's, so a connection that
registers them gets a database of its own, and two queries' functions of one name
never meet.
"""

from __future__ import annotations

import os
from functools import lru_cache

import duckdb


@lru_cache(maxsize=1)
def _database(pid: int) -> duckdb.DuckDBPyConnection:
    """The process's in-memory database (keyed by process: a forked child opens its own)."""
    return duckdb.connect()


def connection(registers_functions: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose temporary objects no other connection sees.
    ``registers_functions``: the caller will ``create_function`` on it."""
    if registers_functions:
        return duckdb.connect()
    return _database(os.getpid()).cursor()
