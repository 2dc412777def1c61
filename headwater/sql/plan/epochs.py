"""``EXTRACT(EPOCH FROM x)`` of an interval, told from that of a time.

DuckDB reads both: the seconds since 1970 of a timestamp, the seconds an
interval lasts (``EXTRACT(EPOCH FROM ended - started)``). Spark has no EPOCH
field: its translation (:mod:`headwater.sql.plan.translate`) is the seconds of
the timestamp's microseconds for a time, a cast to seconds for an interval, so
it needs to know which. sqlglot's type annotation cannot tell (it types
``ended - started`` as a TIMESTAMP), so the planner asks DuckDB, over the
query's tables empty (no row is read): the query with ``x`` doubled binds only
where ``x`` is an interval (a time cannot be multiplied). The answer is kept on
the call's node (:data:`INTERVAL_EPOCH` in its meta), which copies of the query
keep.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

#: The meta key of an EXTRACT(EPOCH FROM x) whose ``x`` is an interval.
INTERVAL_EPOCH = "interval_epoch"


def is_epoch(node: exp.Expression) -> bool:
    """Whether ``node`` is an ``EXTRACT(EPOCH FROM ...)``."""
    field = node.this if isinstance(node, exp.Extract) else None
    return isinstance(field, exp.Var) and field.name.upper() == "EPOCH"


def epoch_calls(query: exp.Expression) -> list[exp.Extract]:
    """The query's ``EXTRACT(EPOCH FROM ...)`` calls, in a fixed order."""
    return [node for node in query.find_all(exp.Extract) if is_epoch(node)]


def mark_interval_epochs(query: exp.Expression, binds: Callable[[exp.Expression], bool]) -> None:
    """Mark each EPOCH call of ``query`` whose argument is an interval.
    ``binds(q)``: whether ``q`` binds over the query's tables (DuckDB)."""
    for index, call in enumerate(epoch_calls(query)):
        probe = query.copy()
        argument = epoch_calls(probe)[index].expression
        argument.replace(
            exp.Mul(this=exp.Paren(this=argument.copy()), expression=exp.Literal.number(2))
        )
        call.meta[INTERVAL_EPOCH] = binds(probe)
