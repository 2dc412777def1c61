"""Binding a query to its tables on a runner: the one place that picks the runner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from headwater.sql.errors import SqlError


def bind(
    query: Any,
    tables: Mapping[str, Any] | None = None,
    *,
    name: str = "query",
    runner="local",
    functions=None,
    state_ttl=None,
    fast_path: bool = True,
):
    """A :class:`~headwater.sql.execute.query.SqlQuery` of ``query`` (text or parsed) over
    ``tables`` on ``runner`` (``"local"`` or ``"spark"``), calling ``functions``
    (:class:`~headwater.sql.plan.functions.ScalarFunction`, a list or by name);
    ``state_ttl``: the query's state time-to-live (:mod:`headwater.sql.plan.ttl`);
    ``fast_path``: whether a plain windowed aggregate may take the fast path."""
    if not isinstance(query, str | exp.Expression):
        raise SqlError(
            f"the query must be SQL text, not {type(query).__name__}",
            hint='Pass the query as a string, e.g. hw.sql("SELECT ... FROM Bid", {"Bid": df})',
        )
    if tables is not None and not isinstance(tables, Mapping):
        raise SqlError(
            f"tables must map each table's name to its table, not be a {type(tables).__name__}",
            hint='Name the table the query reads, e.g. tables={"Bid": df}',
        )
    if runner == "spark":
        from headwater.sql.execute.spark import SparkSqlQuery

        return SparkSqlQuery(
            query, tables or {}, name, functions, state_ttl=state_ttl, fast_path=fast_path
        )
    if runner != "local":
        raise SqlError(f"unknown runner {runner!r}", hint="Use runner='local' or runner='spark'")
    from headwater.sql.execute.query import SqlQuery

    return SqlQuery(query, tables or {}, name, functions, state_ttl=state_ttl, fast_path=fast_path)
