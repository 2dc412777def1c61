"""headwater's streaming SQL: time-varying relations, windowing table functions
and EMIT (docs/sql.md).

``hw.sql(query, tables={...})`` binds a query to its tables and streams; the
package itself is callable, so ``import headwater as hw; hw.sql(...)`` and
``from headwater.sql import sql`` are the same function.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = [
    "Corrections",
    "QualityWatermark",
    "ScalarFunction",
    "SqlError",
    "SqlQuery",
    "function",
    "read_replay",
    "sql",
]


def sql(
    query: Any,
    tables: dict[str, Any] | None = None,
    *,
    name: str = "query",
    runner="local",
    functions=None,
    state_ttl=None,
    fast_path: bool = True,
):
    """Bind ``query`` to ``tables`` (name -> pandas/Spark DataFrame, an
    ``hw.from_pandas``/``hw.from_spark`` source, or :func:`read_replay`).

    ``runner``: ``"local"`` (DuckDB and the model in this process) or
    ``"spark"`` (native Spark batch plans; Structured Streaming for streams).
    ``functions``: the Python functions the query calls (:func:`function`; a
    list, or a mapping name -> function). ``state_ttl``: drop a key's state once
    no row of it arrived for this long (``"1 hour"``; docs/sql.md, "State
    time-to-live"). ``fast_path=False``: a plain windowed aggregate runs on the
    general path too (to compare the two; ``explain()`` says so). Returns an
    :class:`~headwater.sql.execute.query.SqlQuery`.
    """
    from headwater.sql.bind import bind

    return bind(
        query,
        tables,
        name=name,
        runner=runner,
        functions=functions,
        state_ttl=state_ttl,
        fast_path=fast_path,
    )


def __getattr__(name: str) -> Any:
    if name == "SqlError":  # sqlglot is imported on first use (`headwater sql --help`)
        from headwater.sql.errors import SqlError

        return SqlError
    if name == "SqlQuery":
        from headwater.sql.execute.query import SqlQuery

        return SqlQuery
    if name == "read_replay":
        from headwater.sql.execute.replay import read_replay

        return read_replay
    if name == "QualityWatermark":
        from headwater.sql.plan.quality import QualityWatermark

        return QualityWatermark
    if name in ("function", "ScalarFunction"):
        from headwater.sql.plan import functions

        return getattr(functions, name)
    if name == "Corrections":
        from headwater.sql.plan.catalog import Corrections

        return Corrections
    raise AttributeError(f"module 'headwater.sql' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """``headwater.sql`` is also the function :func:`sql` (so ``hw.sql(...)`` works
    after the submodule is imported, when Python binds the module to the name)."""

    def __call__(self, query: Any, tables: dict[str, Any] | None = None, **options: Any):
        return sql(query, tables, **options)


sys.modules[__name__].__class__ = _CallableModule
