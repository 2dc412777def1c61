"""A windowing TVF over a subquery (or a CTE) that filters and projects one table.

``Tumble(TABLE(SELECT item, price, bidtime FROM Bid WHERE price > 2), ...)``
means: the subquery's rows, each assigned its windows. A tumbling, hopping or
cumulating window of a row is read from that row's event time alone, so the
same rows come out when the table is windowed first and the subquery's WHERE
and SELECT list apply after. The query is rewritten that way, into a derived
table over a TVF of the table itself, whose event time carries the table's
watermark; from there it plans as any such query (the bounded query reads the
same text). A session's windows depend on which rows exist, so a SESSION over a
subquery stays refused, as does a subquery that is more than a filter and a
projection of one table, or whose time column is computed.
"""

from __future__ import annotations

from sqlglot import exp

from headwater.sql.errors import SqlError, position
from headwater.sql.parse.dialect import WindowTVF
from headwater.sql.plan.catalog import Catalog
from headwater.sql.plan.translate import window_names

#: The SELECT parts a subquery under a TVF may have (a filter and a projection).
_ALLOWED = {"expressions", "from_", "where"}
_HINT = (
    "Window the table itself and filter in WHERE, e.g. FROM Tumble(TABLE(Bid), ...) WHERE price > 2"
)


def inline_tvf_subqueries(query: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``query`` with each TVF over a filtering subquery, or a CTE that is one,
    rewritten as the subquery over a TVF of its table (SqlError at the TVF where
    that does not mean the same). The derived table takes the TVF's alias, else
    the CTE's or the table's name."""
    ctes = {cte.alias_or_name.lower(): cte.this for cte in query.find_all(exp.CTE)}
    for tvf in list(query.find_all(WindowTVF)):
        data, name = tvf.this, None
        if isinstance(data, exp.Table):
            name = data.name
            if data.args.get("db") or name.lower() not in ctes:
                continue  # a table of the catalog
            data = ctes[name.lower()]
        select = data.this if isinstance(data, exp.Subquery) else data
        _check(tvf, select)
        table = _source(select)
        columns = catalog.get(table.name, table).columns
        tvf.replace(_rewritten(tvf, select, columns, name or table.name))
    _drop_unread(query, {n for n in ctes if n not in _read_names(query)})
    return query


def _read_names(query: exp.Expression) -> set[str]:
    return {t.name.lower() for t in query.find_all(exp.Table) if not t.args.get("db")}


def _drop_unread(query: exp.Expression, unread: set[str]) -> None:
    """Remove the CTEs no table reference reads any more (each one inlined into
    its TVFs): planning reads every CTE as a part of the query."""
    for cte in list(query.find_all(exp.CTE)):
        if cte.alias_or_name.lower() in unread:
            cte.pop()
    for with_ in list(query.find_all(exp.With)):
        if not with_.expressions:
            with_.pop()


def _source(select: exp.Select) -> exp.Table:
    return select.args["from_"].this


def _refuse(tvf: WindowTVF, reason: str) -> SqlError:
    line, col = position(tvf)
    return SqlError(f"a windowing table function over this subquery: {reason}", line, col, _HINT)


def _check(tvf: WindowTVF, select: exp.Expression) -> None:
    """SqlError unless ``select`` only filters and projects one table."""
    if tvf.args["kind"] == "SESSION":
        raise _refuse(tvf, "a session's windows depend on which rows the subquery keeps")
    if not isinstance(select, exp.Select):
        raise _refuse(tvf, "it is not a SELECT")
    extra = [k for k, v in select.args.items() if v not in (None, [], False) and k not in _ALLOWED]
    source = select.args.get("from_")
    if extra or source is None or not isinstance(source.this, exp.Table):
        raise _refuse(tvf, "it does more than filter and project one table")
    nested = (exp.AggFunc, exp.Window, exp.Subquery, exp.Select, WindowTVF)
    if any(node is not select for node in select.find_all(*nested)):
        raise _refuse(tvf, "it aggregates, ranks or reads another query")


def _time_column(tvf: WindowTVF, select: exp.Select) -> str:
    """The table's column that the TVF's DESCRIPTOR names through the subquery."""
    name = tvf.args["timecol"].name
    if any(item.is_star for item in select.expressions):
        return name
    for item in select.expressions:
        if item.alias_or_name == name:
            inner = item.this if isinstance(item, exp.Alias) else item
            if isinstance(inner, exp.Column):
                return inner.name
            raise _refuse(tvf, f"its column {name!r} is computed, not the table's event time")
    raise _refuse(tvf, f"it has no column {name!r}")


def _rewritten(tvf: WindowTVF, select: exp.Select, columns: list[str], name: str) -> exp.Subquery:
    """``(SELECT items, window columns FROM TVF(TABLE(t)) [AS a] WHERE ...) AS alias``,
    a star spelt out as the table's columns (the planner follows named columns
    through a derived table to find the windows a GROUP BY names)."""
    table = _source(select)
    inner_alias = table.args.get("alias")
    qualifier = inner_alias.name if inner_alias else None
    windowed = tvf.copy()
    windowed.set("this", exp.Table(this=table.this.copy(), db=table.args.get("db")))
    timecol = tvf.args["timecol"].copy()
    timecol.set("this", exp.to_identifier(_time_column(tvf, select)))
    windowed.set("timecol", timecol)
    windowed.set("alias", inner_alias.copy() if inner_alias else None)
    items: list[exp.Expression] = []
    for item in select.expressions:
        if item.is_star:
            items += [exp.column(c, table=qualifier, quoted=True) for c in columns]
        else:
            items.append(item.copy())
    items += [exp.column(n, table=qualifier) for n in window_names(tvf)]
    body = exp.select(*items).from_(windowed)
    if select.args.get("where") is not None:
        body.set("where", select.args["where"].copy())
    alias = tvf.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name))
    return exp.Subquery(this=body, alias=alias.copy())
