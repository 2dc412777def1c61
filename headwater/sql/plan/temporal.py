"""A temporal join: ``FOR SYSTEM_TIME AS OF`` an event time against a versioned stream.

``Orders o JOIN Rates FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency =
r.currency``, ``Rates`` a stream with ``PRIMARY KEY (currency)``, joins each
order with the version of its currency valid at the order's event time: the
``Rates`` row of that key with the largest ``rate_time <= o.order_time`` (as
Flink's event-time temporal join: a version is valid from its own time,
inclusive, to the next version's time, exclusive). An inner join drops an order
without a valid version; a LEFT JOIN keeps it with NULLs.

It becomes a join headwater maintains exactly, keyed by the primary key: each
version with the start of the next one (``LEAD`` of the event time per key), and
the order joined with the version whose interval holds its event time. A late
version shortens the interval of the one before it, which retracts the joined
rows it now governs and joins them anew. Two versions of one key at the same
time are ordered by their other columns: the last one is valid (a bounded table
has no arrival order to tell them apart by).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from headwater.sql.errors import SqlError, position
from headwater.sql.parse.dialect import Headwater
from headwater.sql.plan.catalog import Catalog, Table

#: The column a version's validity ends at (the next version's time, NULL for the latest).
VALID_TO = "__hw_valid_to"


def versioned_join(version: exp.Version, table: Table, catalog: Catalog) -> None:
    """Rewrite the join of ``version`` (``table FOR SYSTEM_TIME AS OF at``) in place
    into a join with ``table``'s versions and their validity; SqlError where the
    temporal join cannot be read exactly."""
    ref, at = version.parent, version.args["expression"]
    join = ref.parent
    alias = ref.alias_or_name
    _check_join(version, join, table)
    if version.args.get("kind") != "AS OF":
        raise SqlError(
            f"FOR SYSTEM_TIME {version.args.get('kind')} against a stream: a temporal join "
            "looks one version up, AS OF a time",
            *position(version),
            "Write FOR SYSTEM_TIME AS OF o.order_time",
        )
    if any(c.table.lower() == alias.lower() for c in at.find_all(exp.Column)):
        raise SqlError(
            f"FOR SYSTEM_TIME AS OF {at.sql()} reads the versioned table {alias!r} itself",
            *position(at),
            "Look the version up at a time of the other side: FOR SYSTEM_TIME AS OF o.order_time",
        )
    _check_key(version, join, table, alias)
    versions = _versions(table)
    versions.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    ref.replace(versions)
    valid_from = exp.column(table.event_time, alias, quoted=True)
    valid_to = exp.column(VALID_TO, alias, quoted=True)
    during = exp.and_(
        exp.LTE(this=valid_from, expression=at.copy()),
        exp.paren(
            exp.or_(
                exp.LT(this=at.copy(), expression=valid_to),
                exp.Is(this=valid_to.copy(), expression=exp.Null()),
            )
        ),
    )
    join.set("on", exp.and_(join.args["on"], during))
    _expand_stars(join.parent, versions, table, catalog)


def _check_join(version: exp.Version, join: exp.Expr, table: Table) -> None:
    side = (join.args.get("side") or "").upper() if isinstance(join, exp.Join) else None
    kind = (join.args.get("kind") or "").upper() if isinstance(join, exp.Join) else None
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise SqlError(
            "a temporal join (FOR SYSTEM_TIME AS OF) is an inner or LEFT join",
            *position(version),
            "Write FROM Orders o [LEFT] JOIN Rates FOR SYSTEM_TIME AS OF o.order_time AS r ON ...",
        )
    if join.args.get("on") is None or not isinstance(join.parent, exp.Select):
        raise SqlError(
            "a temporal join needs an ON condition that equates the versioned table's key",
            *position(version),
            "Write ... AS r ON o.currency = r.currency",
        )
    if table.event_time is None:
        raise SqlError(
            f"the stream {table.name!r} has no event time to order its versions by",
            *position(version),
            "Declare it: WATERMARK FOR rate_time AS rate_time in its CREATE TABLE",
        )


def _check_key(version: exp.Version, join: exp.Join, table: Table, alias: str) -> None:
    """The versioned stream has a primary key and the ON condition equates all of it
    (Flink's rule): a version is looked up by its key."""
    key = table.primary_key
    if not key:
        raise SqlError(
            f"FOR SYSTEM_TIME AS OF against the stream {table.name!r}, which has no primary "
            "key: a temporal join needs the key its rows are versions of",
            *position(version),
            f"Declare it: PRIMARY KEY (col) NOT ENFORCED in CREATE TABLE {table.name} (...), "
            f"--primary-key {table.name}=col, or read_replay(..., primary_key=['col'])",
        )
    missing = [c for c in key if c not in table.columns]
    if missing:
        raise SqlError(
            f"the primary key of {table.name!r} names {missing[0]!r}, which is not a column",
            *position(version),
            f"Its columns are {', '.join(table.columns)}",
        )
    equated = set()
    on = join.args["on"]
    for cmp in on.flatten() if isinstance(on, exp.And) else [on]:
        if not isinstance(cmp, exp.EQ):
            continue
        for side, other in ((cmp.this, cmp.expression), (cmp.expression, cmp.this)):
            mine = isinstance(side, exp.Column) and side.table.lower() == alias.lower()
            if mine and not any(
                c.table.lower() == alias.lower() for c in other.find_all(exp.Column)
            ):
                equated.add(side.name.lower())
    absent = [c for c in key if c.lower() not in equated]
    if absent:
        raise SqlError(
            f"the ON condition of the temporal join does not equate {alias}.{absent[0]}, "
            f"of the primary key of {table.name!r} ({', '.join(key)})",
            *position(on),
            f"Look a version up by its whole key: ON o.{absent[0]} = {alias}.{absent[0]}",
        )


def _versions(table: Table) -> exp.Subquery:
    """``table``'s rows, each with the time its validity ends: the next version's
    time per key (ties ordered by the other columns), NULL for the latest."""

    def q(name: str) -> str:
        return exp.to_identifier(name, quoted=True).sql(dialect=Headwater)

    key = ", ".join(q(c) for c in table.primary_key)
    others = [c for c in table.columns if c != table.event_time and c not in table.primary_key]
    order = ", ".join(q(c) for c in [table.event_time, *others])
    text = (
        f"SELECT *, LEAD({q(table.event_time)}) OVER (PARTITION BY {key} ORDER BY {order}) "
        f"AS {q(VALID_TO)} FROM {q(table.name)}"
    )
    return exp.Subquery(this=sqlglot.parse_one(text, read=Headwater))


def _expand_stars(
    select: exp.Select, versions: exp.Subquery, table: Table, catalog: Catalog
) -> None:
    """``*`` and ``r.*`` without :data:`VALID_TO`: the versioned side's own columns.
    SqlError where a star would give two columns of one name (a changelog could not
    tell them apart)."""
    alias = versions.alias_or_name
    mine = [exp.column(c, alias, quoted=True) for c in table.columns]
    sources = [select.args["from_"].this, *(j.this for j in select.args.get("joins") or [])]
    columns = {s.alias_or_name.lower(): _columns(s, versions, table, catalog) for s in sources}
    _check_star_names(select, columns)
    expanded: list[exp.Expr] = []
    for item in select.expressions:
        if isinstance(item, exp.Star):
            for source in sources:
                star = exp.Column(this=exp.Star(), table=exp.to_identifier(source.alias_or_name))
                expanded.extend([c.copy() for c in mine] if source is versions else [star])
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            is_mine = item.table.lower() == alias.lower()
            expanded.extend([c.copy() for c in mine] if is_mine else [item])
        else:
            expanded.append(item)
    select.set("expressions", expanded)


def _columns(source: exp.Expr, versions: exp.Subquery, table: Table, catalog: Catalog) -> list[str]:
    """The columns a star over ``source`` gives, where known (a table, the versions)."""
    if source is versions:
        return table.columns
    if isinstance(source, exp.Table):
        return catalog.get(source.name, source).columns
    return []


def _check_star_names(select: exp.Select, columns: dict[str, list[str]]) -> None:
    items = select.expressions
    if not any(i.is_star for i in items):
        return
    seen: set[str] = set()
    for item in items:
        if isinstance(item, exp.Star):
            names = [n for source in columns.values() for n in source]
        elif item.is_star:
            names = columns.get(item.table.lower(), [])
        else:
            names = [item.alias_or_name]
        for name in names:
            if name.lower() in seen:
                raise SqlError(
                    f"the select list of the temporal join gives two columns named {name!r}",
                    *position(item),
                    f"List the columns, e.g. SELECT o.*, r.rate (without r.{name})",
                )
            seen.add(name.lower())
