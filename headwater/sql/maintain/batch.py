"""One evaluation per step: a group-mode query rewritten to run over all the
event-time groups that fire in a step at once.

A query's result over several groups is the union of its result per group,
so it can run once over the groups' rows together when every operator keeps
the groups apart. The rewrite (of the DuckDB text of
:func:`~headwater.sql.plan.translate.to_engine_sql`, ``mode="group"``) gives every
stream relation a group id column ``__gid`` and carries it through the
query: into every GROUP BY and window PARTITION BY, every derived relation's
SELECT list (so DISTINCT and UNION / INTERSECT / EXCEPT compare within a
group), every join between stream relations (``AND a.__gid = b.__gid``) and
every subquery expression over a stream (correlated on the group id). The
group bounds relation ``__group`` becomes the table of all fired groups,
joined on the id like a stream. Bounded tables are not tagged.

The rewrite is planned once per query and reads no data. Where a shape
would not keep groups apart exactly (a global aggregate, which yields a row
even for an empty group; a LIMIT per group; a bounded relation preserved by an
outer join with a stream, whose rows would appear once instead of once per
group), :func:`plan_batch` says why, and the query is evaluated per group.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from headwater.sql.plan.translate import GROUP_RELATION

#: The group id column of every stream relation and of the batched output.
GID = "__gid"
_QUERIES = (exp.Select, exp.SetOperation, exp.Subquery)


@dataclass(frozen=True)
class BatchQuery:
    """A query's batched form: its output is the per-group columns, then ``__gid``."""

    text: str


class _Unsupported(Exception):
    """A shape the rewrite does not batch exactly (the message says which)."""


def plan_batch(text: str, streams: Iterable[str]) -> BatchQuery | str:
    """The batched form of the group-mode DuckDB query ``text`` over the stream
    relations ``streams``, or a sentence saying why it is evaluated per group."""
    try:
        tree = sqlglot.parse_one(text, read="duckdb")
    except SqlglotError as exc:
        return f"its SQL could not be parsed for batching ({str(exc).splitlines()[0]})"
    try:
        if not _Rewriter(streams).query(tree, {}, None, frozenset()):
            return "its result does not come from a stream relation"
    except _Unsupported as exc:
        return str(exc)
    return BatchQuery(tree.sql(dialect="duckdb"))


def _gid(table: exp.Identifier) -> exp.Column:
    return exp.Column(this=exp.to_identifier(GID), table=table.copy())


def _alias(source: exp.Expression) -> exp.Identifier:
    """The identifier a FROM item is referenced by."""
    alias = source.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.this is not None:
        return alias.this
    if isinstance(source, exp.Table):
        return source.this
    raise _Unsupported(f"a {source.key} without a name reads a stream")


def _in_scope(select: exp.Select) -> Iterator[exp.Expression]:
    """The nodes of ``select``'s own clauses: not its FROM items or CTEs, and not
    inside its subqueries (those are yielded, not entered)."""
    stack: list[exp.Expression] = []
    for key, value in select.args.items():
        if key in ("from_", "with_"):
            continue
        for node in value if isinstance(value, list) else [value]:
            if isinstance(node, exp.Join):
                node = node.args.get("on")
            if isinstance(node, exp.Expression):
                stack.append(node)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _QUERIES):
            continue
        stack.extend(node.iter_expressions())


def _subqueries(select: exp.Select) -> list[exp.Expression]:
    return [n for n in _in_scope(select) if isinstance(n, _QUERIES)]


@dataclass
class _Source:
    """A FROM item of a SELECT: how it is named, and whether it carries ``__gid``."""

    name: exp.Identifier | None
    stream: bool


class _Rewriter:
    """Adds ``__gid`` through a query, in place (raises _Unsupported)."""

    def __init__(self, streams: Iterable[str]) -> None:
        self.streams = {s.lower() for s in streams} | {GROUP_RELATION.lower()}

    # -- queries
    def query(self, node, ctes: dict[str, bool], outer, names: frozenset[str]) -> bool:
        """Rewrite a query; whether it is derived from a stream. ``outer``: the
        enclosing SELECT's group id when ``node`` is a subquery expression (it is
        correlated on it, and outputs no ``__gid``), else None."""
        if isinstance(node, exp.Subquery):
            self._no_limit(node, outer)
            return self.query(node.this, ctes, outer, names)
        ctes = self._ctes(node, ctes)
        if isinstance(node, exp.SetOperation):
            self._no_limit(node, None)
            if not self._reads(node, ctes):
                return False
            if outer is not None:
                raise _Unsupported("a UNION/INTERSECT/EXCEPT over a stream in a subquery")
            sides = [self.query(node.left, ctes, None, names)]
            sides.append(self.query(node.right, ctes, None, names))
            if not all(sides):
                raise _Unsupported(
                    "a UNION/INTERSECT/EXCEPT of a stream relation and a bounded one"
                )
            return True
        if isinstance(node, exp.Select):
            return self.select(node, ctes, outer, names)
        raise _Unsupported(f"a {node.key} query")

    def _ctes(self, node: exp.Expression, ctes: dict[str, bool]) -> dict[str, bool]:
        with_ = node.args.get("with_")
        if with_ is None:
            return ctes
        if with_.args.get("recursive"):
            raise _Unsupported("a recursive CTE")
        ctes = dict(ctes)
        for cte in with_.expressions:
            ctes[cte.alias_or_name.lower()] = self.query(cte.this, ctes, None, frozenset())
        return ctes

    def _reads(self, node: exp.Expression, ctes: dict[str, bool]) -> bool:
        """Whether ``node`` reads a stream relation anywhere."""
        for table in node.find_all(exp.Table):
            name = table.name.lower()
            if ctes[name] if name in ctes else name in self.streams:
                return True
        return False

    @staticmethod
    def _no_limit(node: exp.Expression, outer) -> None:
        if outer is None and any(node.args.get(k) for k in ("limit", "offset", "fetch")):
            raise _Unsupported("a LIMIT/OFFSET in a subquery over a stream (a per-group LIMIT)")

    # -- one SELECT
    def select(self, node: exp.Select, ctes: dict[str, bool], outer, names) -> bool:
        sources = self._sources(node, ctes)
        streams = [s for s in sources if s.stream]
        if not streams:
            if any(self._reads(q, ctes) for q in _subqueries(node)):
                raise _Unsupported("a subquery over a stream inside a query over bounded tables")
            return False
        self._no_limit(node, outer)
        for key in ("pivots", "laterals", "connect"):
            if node.args.get(key):
                raise _Unsupported(f"a {key.upper()} clause over a stream")
        gid = self._joins(node, sources)
        for sub in _subqueries(node):
            if self._reads(sub, ctes):
                self.query(sub, ctes, gid, frozenset(s.name.name.lower() for s in streams))
        self._group(node, gid, outer)
        self._windows(node, gid)
        self._stars(node, streams)
        if outer is None:
            node.append("expressions", exp.alias_(gid.copy(), GID))
        else:
            own = {s.name.name.lower() for s in sources if s.name is not None}
            if own & names:
                raise _Unsupported(
                    f"a subquery reuses the name {sorted(own & names)[0]} of the query "
                    "around it (give it another alias)"
                )
            node.where(exp.EQ(this=gid.copy(), expression=outer.copy()), copy=False)
        return True

    def _sources(self, node: exp.Select, ctes: dict[str, bool]) -> list[_Source]:
        """The SELECT's FROM items in order (FROM, then each join), rewritten."""
        from_ = node.args.get("from_")
        items = [from_.this] if from_ is not None else []
        items += [j.this for j in node.args.get("joins") or []]
        out = []
        for i, item in enumerate(items):
            if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
                name = item.name.lower()
                stream = ctes[name] if name in ctes else name in self.streams
            elif isinstance(item, exp.Subquery):
                stream = self.query(item, ctes, None, frozenset())
                if stream and not item.alias:
                    item.set("alias", exp.TableAlias(this=exp.to_identifier(f"__hw_b{i}")))
            elif self._reads(item, ctes):
                raise _Unsupported(f"a {item.key} over a stream in FROM")
            else:
                stream = False
            has_name = stream or isinstance(item, exp.Table) or item.alias
            out.append(_Source(_alias(item) if has_name else None, stream))
        return out

    def _joins(self, node: exp.Select, sources: list[_Source]) -> exp.Expression:
        """Join every stream relation to the earlier ones on ``__gid``; the SELECT's
        group id (COALESCE over the stream relations when an outer join may
        leave the first one NULL)."""
        visible = [_gid(sources[0].name)] if sources[0].stream else []
        outer_join = False
        for join, source in zip(node.args.get("joins") or [], sources[1:], strict=True):
            side, kind = join.side.upper(), join.kind.upper()
            _check_preserved(side, kind, bool(visible), source.stream)
            outer_join |= side in ("RIGHT", "FULL")
            if not source.stream:
                continue
            if visible:
                _on_group(join, visible)
            if kind not in ("SEMI", "ANTI"):
                visible.append(_gid(source.name))
        if outer_join and len(visible) > 1:
            return exp.func("COALESCE", *visible)
        return visible[0]

    def _group(self, node: exp.Select, gid: exp.Expression, outer) -> None:
        group = node.args.get("group")
        if group is not None:
            if any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup")):
                raise _Unsupported("GROUPING SETS/ROLLUP/CUBE over a stream")
            if not group.args.get("all"):
                group.append("expressions", gid.copy())
            return
        aggregates = [
            a
            for a in _in_scope(node)
            if isinstance(a, exp.AggFunc)
            and isinstance(a.find_ancestor(exp.Window, exp.Select), exp.Select)
        ]
        if (aggregates or node.args.get("having")) and outer is None:
            raise _Unsupported(
                "an aggregate without GROUP BY over a derived stream relation (it yields a "
                "row even for a group where that relation is empty)"
            )

    @staticmethod
    def _windows(node: exp.Select, gid: exp.Expression) -> None:
        if node.args.get("windows"):
            raise _Unsupported("a named WINDOW over a stream")
        for window in [w for w in _in_scope(node) if isinstance(w, exp.Window)]:
            if window.alias:
                raise _Unsupported("a named WINDOW over a stream")
            window.set("partition_by", [*(window.args.get("partition_by") or []), gid.copy()])

    @staticmethod
    def _stars(node: exp.Select, streams: list[_Source]) -> None:
        """``*`` and ``s.*`` of a stream relation leave ``__gid`` out (added once, last)."""
        distinct = node.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise _Unsupported("DISTINCT ON over a stream")
        named = {s.name.name.lower() for s in streams}
        for item in node.expressions:
            star = item if isinstance(item, exp.Star) else None
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                star = item.this if item.table.lower() in named else None
            if star is not None:
                star.set("except_", [*(star.args.get("except_") or []), exp.column(GID)])


def _check_preserved(side: str, kind: str, left: bool, right: bool) -> None:
    """An outer join that preserves a bounded relation against a stream would keep
    its unmatched rows once, where per group they appear in every group."""
    preserved_bounded = (
        (side == "LEFT" and right and not left)
        or (side == "RIGHT" and left and not right)
        or (side == "FULL" and left != right)
        or (kind in ("SEMI", "ANTI") and right and not left)
        or (kind == "POSITIONAL" and (left or right))
    )
    if preserved_bounded:
        raise _Unsupported(
            f"a {side or kind} JOIN that keeps a bounded relation's rows against a stream"
        )


def _on_group(join: exp.Join, visible: list[exp.Column]) -> None:
    """Add ``earlier.__gid = this.__gid`` to ``join``'s condition."""
    this = _gid(_alias(join.this))
    if join.args.get("using"):
        if len(visible) > 1:
            raise _Unsupported("a JOIN ... USING after another join of streams")
        join.append("using", exp.to_identifier(GID))
        return
    if join.method.upper() == "NATURAL":
        if len(visible) > 1:
            raise _Unsupported("a NATURAL JOIN after another join of streams")
        return  # both sides have __gid: a natural join matches it
    earlier = visible[0] if len(visible) == 1 else exp.func("COALESCE", *visible)
    cond = exp.EQ(this=earlier.copy(), expression=this)
    on = join.args.get("on")
    join.set("on", exp.and_(on, cond) if on is not None else cond)
    if join.kind.upper() == "CROSS":
        join.set("kind", None)
