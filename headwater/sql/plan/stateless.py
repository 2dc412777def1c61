"""Which streaming queries run without state: on Spark
(:mod:`headwater.sql.execute.stateless_spark`) and on the local runner
(``replay_each_row`` in :mod:`headwater.sql.execute.local_steps`).

A query in which no operator combines rows (:class:`~headwater.sql.plan.keys.KeyKind`
``ROW``) maps each row to its own result rows, so each micro-batch's changes are
the query over that micro-batch's rows: Spark's own projection, with no state
store and no Python. This module says whether a query has that shape (a single
SELECT of scalar expressions from one stream, an optional WHERE, no windowing
table function, every change emitted at once) or why not, so that ``explain()``
and tests can tell a user which path a query takes, and gives the SELECT that
also returns each result row's event time, the group the changelog numbers its
versions in.

The local runner replays a whole recorded stream at once, so it also takes
``EMIT AFTER WATERMARK``: a row's results then wait for the first step whose
watermark passes its instant, which one search over the steps' watermarks finds.
A Spark micro-batch cannot hold rows for a later one without a state store.
"""

from __future__ import annotations

from datetime import timedelta

from sqlglot import exp

from headwater.model.windows import FixedWindows
from headwater.sql.plan.keys import KeyKind
from headwater.sql.plan.planner import QueryPlan

#: The column of the stateless SELECT that holds each result row's event time (ms).
EVENT_TIME = "__hw_et"
#: The groups of a query whose operators take each row on its own: event-time instants.
_INSTANTS = FixedWindows(timedelta(milliseconds=1))
#: Clauses of a SELECT that combine rows or read more than the one stream.
_CLAUSES = ("with_", "joins", "laterals", "distinct", "qualify", "windows", "pivots", "group")


def why_not(plan: QueryPlan, holds_rows: bool = False) -> str | None:
    """Why the stateless path cannot run ``plan`` (None: it can). ``holds_rows``:
    the runner can keep a row for a later step (the local replay, which sees the
    whole stream), so the path also waits for the watermark; a Spark micro-batch
    cannot without a state store. Python functions are called batched: in the
    replay's one DuckDB query over every row (each row once: no group is evaluated
    again), and on Spark as ``pandas_udf``s in the batch's statement."""
    if not plan.is_stream:
        return "it reads no stream"
    if not plan.fast_path:
        return "the fast paths were switched off for this query (fast_path=False)"
    if plan.key.kind is not KeyKind.ROW:
        return f"an operator combines rows ({plan.key.describe(accumulated=None)})"
    if plan.window_fn != _INSTANTS:
        return "it has a windowing table function"
    waits = _why_it_waits(plan, holds_rows)
    if waits is not None:
        return waits
    if len(plan.streams) != 1 or plan.tables:
        return "it reads more than one table"
    query = plan.group_query
    if not isinstance(query, exp.Select):
        return "it is not a single SELECT"
    for arg in _CLAUSES:
        if query.args.get(arg):
            return f"it has {arg.rstrip('_').upper()}"
    source = query.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return "FROM is not the stream itself"
    for node in query.find_all(exp.Subquery, exp.Exists, exp.Window, exp.AggFunc, exp.Unnest):
        return f"it has {type(node).__name__.upper()}"
    if any(s is not query for s in query.find_all(exp.Select)):
        return "it has a subquery"
    if any(isinstance(item, exp.Column) and item.is_star for item in query.expressions):
        return "it selects a qualified * (write the columns)"
    return None


def _why_it_waits(plan: QueryPlan, holds_rows: bool) -> str | None:
    """Why the stateless path cannot hold the query's changes as its EMIT
    clause asks (None: it emits them at once, or can wait)."""
    emit = plan.emit
    if emit.delay:  # a timer per group, reset by its rows: the model's timers keep it
        return f"its changes wait ({emit.describe()}: a processing-time timer per group)"
    if emit.after_watermark and not holds_rows:
        return (
            f"its changes wait ({emit.describe()}: a micro-batch cannot hold rows for a"
            " later one without a state store)"
        )
    return None


def with_event_time(plan: QueryPlan) -> exp.Select:
    """The query (``why_not`` None) with ``SELECT *`` spelled out as the stream's
    columns and each row's event time (:data:`EVENT_TIME`, a column of the
    micro-batch's rows) as the last column."""
    query = plan.group_query.copy()
    stream = plan.streams[0]
    items: list[exp.Expression] = []
    for item in query.expressions:
        if isinstance(item, exp.Star):
            items += [exp.column(c, quoted=True) for c in stream.columns]
        else:
            items.append(item)
    items.append(exp.column(EVENT_TIME, quoted=True))
    query.set("expressions", items)
    return query


def columns_read(plan: QueryPlan) -> frozenset[str]:
    """The stream's columns the query (``why_not`` None) reads, its ``SELECT *``
    spelled out: on Spark a micro-batch without a dead-letter sink carries only these
    from a stream that is not a permissive file stream (a micro-batch is
    materialized before the query runs over it, so the files' other columns would
    be read and converted for nothing). Names are matched without case, as Spark
    resolves them: a match too many only keeps a column."""
    names = {c.name.lower() for c in with_event_time(plan).find_all(exp.Column)}
    return frozenset(c for c in plan.streams[0].columns if c.lower() in names)
