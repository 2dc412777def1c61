"""The columns of each stream that a query's per-group evaluation reads.

The general path keeps every row of a group until the group settles and
evaluates the query over them. A column no part of the query names would be
kept, converted and handed to DuckDB for nothing: NEXMark's q5 counts bids per
auction, yet each bid's URL and extra text was held in every window of the
bid. This module finds, from the query's text alone (planning never reads
data), the columns a group's evaluation may read, so that the reducer keeps
only those. The dead letters still carry every column: the rows the reducer
drops are its input rows, which keep them all.

The answer errs on the side of keeping: a column is read when its name (without
case, as DuckDB and Spark resolve names) is any identifier of the query, and
every column is read when the query can reach columns without naming them (a
``*`` other than ``COUNT(*)``'s, a ``NATURAL`` join, DuckDB's ``COLUMNS(...)``,
or a table's name used as a value: a whole row as a struct).
"""

from __future__ import annotations

from sqlglot import exp

from headwater.sql.plan.planner import QueryPlan


def stream_columns_read(plan: QueryPlan) -> dict[str, frozenset[str]]:
    """Per stream (by name), the columns that evaluating ``plan``'s group query
    may read, its event time always among them."""
    query = plan.group_query
    everything = {t.name: frozenset(t.columns) for t in plan.streams}
    if reaches_unnamed_columns(query):
        return everything
    names = {node.name.lower() for node in query.find_all(exp.Identifier)}
    return {
        t.name: frozenset(c for c in t.columns if c.lower() in names or c == t.event_time)
        for t in plan.streams
    }


def reaches_unnamed_columns(query: exp.Expression) -> bool:
    """Whether ``query`` may read a column that it does not name."""
    if any(not isinstance(star.parent, exp.Count) for star in query.find_all(exp.Star)):
        return True
    if any(join.args.get("method") == "NATURAL" for join in query.find_all(exp.Join)):
        return True
    if any(True for _ in query.find_all(exp.Columns)):
        return True
    relations = {t.name.lower() for t in query.find_all(exp.Table)}
    relations |= {a.name.lower() for a in query.find_all(exp.TableAlias) if a.name}
    return any(
        not column.table and column.name.lower() in relations
        for column in query.find_all(exp.Column)
    )
