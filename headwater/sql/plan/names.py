"""Bare names of a query checked against its tables, before an engine sees them.

An engine resolves a bare name that is no column by other rules: DuckDB reads
``user`` as ``CURRENT_USER`` (``SELECT user FROM Bid`` returns 'duckdb' in each
row) and Spark its own keywords. A name that is a column of no table in scope,
nor an alias the query defines, is an unknown column here, with the columns
there are, on every runner. Only the catalog's column names are read, no data.
"""

from __future__ import annotations

from sqlglot import exp

from headwater.sql.errors import SqlError, position
from headwater.sql.plan.planner import WINDOW_COLUMNS, QueryPlan


def _defined(query: exp.Expr) -> set[str]:
    """Names the query itself defines: select aliases, table-alias and CTE column
    lists, lambda parameters, and the column of a table function in FROM
    (``SELECT range FROM range(3)``)."""
    names = {a.alias.lower() for a in query.find_all(exp.Alias) if a.alias}
    for table in query.find_all(exp.Table):
        if isinstance(table.this, exp.Func):
            call = table.this
            names.add((call.name if isinstance(call, exp.Anonymous) else call.sql_name()).lower())
    for alias in query.find_all(exp.TableAlias):
        names |= {c.name.lower() for c in alias.args.get("columns") or []}
    for fn in query.find_all(exp.Lambda):
        names |= {p.name.lower() for p in fn.expressions}
    return names


def known_columns(plan: QueryPlan) -> str:
    """The columns of the query's tables, as an error's hint lists them."""
    tables = (*plan.streams, *plan.tables)
    return "; ".join(f"{t.name}: {', '.join(t.columns)}" for t in tables)


def check_names(plan: QueryPlan) -> None:
    """SqlError at the first bare name that is no column of the query's tables
    (nor a window column or a name the query defines)."""
    known = {c.lower() for t in (*plan.streams, *plan.tables) for c in t.columns}
    known |= WINDOW_COLUMNS | _defined(plan.query)
    unknown = [
        c
        for c in plan.query.find_all(exp.Column)
        if not c.table and c.name and c.name != "*" and c.name.lower() not in known
    ]
    if not unknown:
        return
    placed = sorted((position(c), i) for i, c in enumerate(unknown) if position(c)[0] is not None)
    first = unknown[placed[0][1]] if placed else unknown[0]
    line, col = position(first)
    raise SqlError(f"unknown column {first.name!r}", line, col, f"Columns: {known_columns(plan)}")
