"""Stages: a query whose combining operators need different maintenance keys,
split so that each part is maintained by its own key.

NEXMark q4 takes the maximum bid per auction, then the average of those per
category: no key is common to both aggregates, so as one query it is one group
of every row (:class:`~headwater.sql.plan.keys.KeyKind` ``NONE``). Split in two,
stage 1 (the inner query over the streams) is keyed by the auction, and stage 2
(the outer aggregate over stage 1's table view) by the category: stage 1's
changelog, retractions included, updates stage 2's input, and only the
categories it touched are evaluated again.

A query is split when it is one group as a whole and has this shape: an outer
aggregate (``GROUP BY`` of plain columns, or a global aggregate) reading one
subquery in FROM and nothing else (no join, DISTINCT, window function, nested
subquery, set operation or grouping sets of its own), whose subquery is keyed
by plain columns (state in a global window: nothing is late in either stage),
with no state time-to-live, no ``AFTER DELAY`` and no stream with corrections
(the planner checks these).
Stage 2's key is the outer GROUP BY's columns of the subquery (an expression
among them is left out: a coarser key is exact too); a global aggregate's is
none, one group re-evaluated at each step that changed stage 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from headwater.sql.parse.dialect import WindowTVF
from headwater.sql.plan.keys import KeyKind, KeyPart, MaintenanceKey

#: The table stage 2 reads: stage 1's table view.
STAGE_INPUT = "__stage1"


@dataclass(frozen=True)
class Stage:
    """One stage: its query, its key, what it reads. Stage 1 reads the streams (the
    query plan's ``first_stage`` is its own analyzed query); stage 2's ``query``
    reads :data:`STAGE_INPUT` as ``alias``, and ``columns`` are its key's columns there."""

    number: int
    query: exp.Expression
    key: MaintenanceKey
    reads: str
    alias: str = ""
    columns: tuple[str, ...] = ()

    def describe(self) -> str:
        """The stage, its key and how its state grows (``explain()``)."""
        text = f"stage {self.number} over {self.reads}, {self.key.describe()}"
        if self.number > 1:
            text += f", and it holds stage {self.number - 1}'s table view"
        return text


@dataclass(frozen=True)
class Split:
    """A query's outer aggregate and the subquery it reads (``alias`` in FROM);
    ``path``: the SELECTs from the query down to the aggregate (projections of it
    first, as a sink's column fitting wraps it)."""

    inner: exp.Select
    alias: str
    columns: tuple[str, ...]
    path: tuple[exp.Select, ...]


def _names(select: exp.Select) -> list[str]:
    return [e.alias_or_name for e in select.expressions]


def _own_operators(outer: exp.Select, inner: exp.Expression) -> bool:
    """Whether the outer SELECT combines rows otherwise than by its aggregate."""
    if outer.args.get("distinct") is not None or outer.args.get("joins"):
        return True
    group = outer.args.get("group")
    if group is not None and any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets")):
        return True
    nested = [s for s in outer.find_all(exp.Select, exp.SetOperation) if s is not outer]
    if any(s is not inner and not _within(s, inner) for s in nested):
        return True
    if any(_enclosing(w, outer) for w in outer.find_all(exp.Window)):
        return True
    return any(not _within(t, inner) for t in outer.find_all(WindowTVF))


def _within(node: exp.Expression, ancestor: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.parent
    return False


def _enclosing(node: exp.Expression, select: exp.Select) -> bool:
    return node.find_ancestor(exp.Select) is select


def _subquery(select: exp.Select) -> exp.Subquery | None:
    """The one subquery ``select`` reads (its FROM, no join), if that is all it reads."""
    source = select.args.get("from_")
    sub = source.this if source is not None else None
    if select.args.get("joins") or not isinstance(sub, exp.Subquery):
        return None
    return sub if isinstance(sub.this, exp.Select) else None


def _aggregates(select: exp.Select) -> bool:
    found = [a for e in select.expressions for a in e.find_all(exp.AggFunc)]
    return select.args.get("group") is not None or bool(found)


def _projection(select: exp.Select, sub: exp.Subquery) -> bool:
    """Whether ``select`` only projects and filters the rows of ``sub``."""
    return not _aggregates(select) and not _own_operators(select, sub.this)


def split(query: exp.Expression) -> Split | None:
    """The outer aggregate / subquery split of ``query``, or None if it has not
    the shape of a two-stage query (module docstring)."""
    if not isinstance(query, exp.Select) or query.args.get("with"):
        return None
    path = [query]
    sub = _subquery(query)
    while sub is not None and _projection(path[-1], sub):
        path.append(sub.this)
        sub = _subquery(sub.this)
    select = path[-1]
    if sub is None or not _aggregates(select) or _own_operators(select, sub.this):
        return None
    inner = sub.this
    if any(inner.args.get(a) is not None for a in ("order", "limit", "offset", "emit")):
        return None
    if any(isinstance(e, exp.Star) or e.is_star for s in path for e in s.expressions):
        return None
    alias = sub.alias_or_name or STAGE_INPUT  # an unnamed subquery: the input's name
    outputs = {n.lower(): n for n in _names(inner)}
    group = select.args.get("group")
    columns = []
    for item in group.expressions if group is not None else []:
        if isinstance(item, exp.Column) and item.table.lower() in ("", alias.lower()):
            name = outputs.get(item.name.lower())
            if name is not None and name not in columns:
                columns.append(name)
    return Split(inner=inner, alias=alias, columns=tuple(columns), path=tuple(path))


def stages(query: exp.Expression, first: MaintenanceKey) -> tuple[Stage, ...]:
    """The two stages of ``query`` (its group query: without ORDER BY / LIMIT),
    ``first``: stage 1's (its subquery's) key; () when stage 1 is not keyed by
    plain columns (then the query stays one group). Stage 2 reads stage 1's table
    view with its key's text in :data:`GROUP_KEY`, which it carries up to its
    result when it has a key."""
    if first.kind is not KeyKind.COLUMNS or first.ttl is not None:
        return ()
    outer = query.copy()
    found = split(outer)
    assert found is not None  # split(query) found it
    table = exp.Table(
        this=exp.to_identifier(STAGE_INPUT),
        alias=exp.TableAlias(this=exp.to_identifier(found.alias)),
    )
    found.inner.parent.replace(table)
    shown = "stage1" if found.alias == STAGE_INPUT else found.alias.lower()
    parts = tuple(KeyPart(((shown, c),)) for c in found.columns)
    if parts:
        _carry_key(found)
    kind = KeyKind.COLUMNS if parts else KeyKind.NONE
    key = MaintenanceKey(kind, parts, ("GROUP BY" if parts else "aggregate",))
    return (
        Stage(1, found.inner, first, "the streams"),
        Stage(2, outer, key, "stage 1's changelog", alias=found.alias, columns=found.columns),
    )


#: The column of stage 2's input and result with its group's key (as text).
GROUP_KEY = "__gk"


def _carry_key(found: Split) -> None:
    """Group the aggregate by :data:`GROUP_KEY` too (a function of its key
    columns: the same groups) and select it up through the projections."""
    aggregate = found.path[-1]
    column = exp.column(GROUP_KEY, found.alias)
    aggregate.group_by(column.copy(), copy=False)
    aggregate.select(exp.alias_(column, GROUP_KEY), copy=False)
    for select in found.path[:-1]:
        source = select.args["from_"].this.alias_or_name or None
        select.select(exp.alias_(exp.column(GROUP_KEY, source), GROUP_KEY), copy=False)
