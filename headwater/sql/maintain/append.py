"""Which group-mode queries only ever add rows as their groups' rows grow.

A query built of selections, projections and inner joins, each stream relation
read once, is a product of its streams, linear in every one: over a group's rows ``S_1 + D_1, ...,
S_n + D_n`` (the rows kept, then the step's new ones) its result is its result
over ``S`` plus, for each stream ``i``, the query over the new rows of the
streams before ``i``, ``D_i``, and the old rows of the streams after it. So a
step's changes are these terms' rows, all inserts: no evaluation of the rows
kept against each other, and no diff against the previous result
(:meth:`headwater.sql.maintain.groups.GroupMaintainer.apply`). Anything that
reads a set of rows as a whole (an aggregate, a window function, DISTINCT, an
outer or semi join, a subquery expression, LIMIT) or may give another value
for the same rows (an unknown or volatile function) is not linear, and such a
query is maintained by evaluating and diffing its groups' rows.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

#: Nodes that read rows as a whole (not one combination at a time), or that
#: may give another value for the same rows.
_WHOLE = {
    exp.AggFunc: "an aggregate",
    exp.Group: "a GROUP BY",
    exp.Having: "a HAVING",
    exp.Distinct: "a DISTINCT",
    exp.Window: "a window function",
    exp.Limit: "a LIMIT",
    exp.Offset: "an OFFSET",
    exp.Order: "an ORDER BY",
    exp.Qualify: "a QUALIFY",
    exp.Except: "an EXCEPT",
    exp.Intersect: "an INTERSECT",
    exp.Exists: "an EXISTS",
    exp.Lateral: "a LATERAL",
    exp.With: "a WITH",
    exp.Anonymous: "a function it does not know to be deterministic",
    exp.Rand: "a random function",
    exp.CurrentTimestamp: "the current time",
    exp.CurrentDate: "the current date",
    exp.CurrentTime: "the current time",
}
#: More of them, where this sqlglot has their nodes.
for _name, _what in (
    ("Uuid", "a random function"),
    ("Randn", "a random function"),
    ("Localtime", "the current time"),
    ("Localtimestamp", "the current time"),
    ("CurrentDatetime", "the current time"),
):
    if hasattr(exp, _name):
        _WHOLE[getattr(exp, _name)] = _what


def append_why_not(text: str, streams: Iterable[str]) -> str | None:
    """Why the group-mode DuckDB query ``text`` over the stream relations
    ``streams`` is not linear in each stream (None: it is, and its groups' results
    only grow by the rows of :mod:`this module's <headwater.sql.maintain.append>`
    terms)."""
    try:
        tree = sqlglot.parse_one(text, read="duckdb")
    except SqlglotError as exc:
        return f"its SQL could not be parsed ({str(exc).splitlines()[0]})"
    for node in tree.walk():
        problem = _problem(node)
        if problem:
            return f"it has {problem}"
    names = [s.lower() for s in streams]
    read = [t.name.lower() for t in tree.find_all(exp.Table) if not t.args.get("db")]
    for name in names:
        if read.count(name) != 1:
            return f"it reads the stream {name!r} {read.count(name)} times, not once"
    return None


def _problem(node: exp.Expression) -> str | None:
    """What in ``node`` itself keeps the query from being linear, if anything."""
    for kind, what in _WHOLE.items():
        if isinstance(node, kind):
            return what
    if isinstance(node, exp.Union):
        # a UNION ALL of two streams is their sum, not their product: its terms
        # are not the ones below
        return "a UNION"
    if isinstance(node, exp.Join):
        if node.side or node.kind not in ("", "INNER", "CROSS") or node.method:
            return f"a {' '.join(p for p in (node.method, node.side, node.kind) if p)} join"
    if isinstance(node, exp.Subquery) and not isinstance(node.parent, exp.From | exp.Join):
        return "a subquery expression"
    if isinstance(node, exp.In) and node.args.get("query") is not None:
        return "an IN subquery"
    if isinstance(node, exp.Any | exp.All):
        return "an ANY or ALL subquery"
    return None
