"""Where a column comes from: a query's columns traced through aliases,
subqueries, CTEs and set operations back to the streams' columns (``window_start
AS starttime`` is still the window start; :mod:`headwater.sql.plan.keys`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from headwater.sql.parse.dialect import WindowTVF
from headwater.sql.plan import buckets
from headwater.sql.plan.catalog import Catalog, Table
from headwater.sql.plan.keys.kinds import (
    NULL_SIDE,
    WINDOW_COLUMNS,
    WINDOW_EDGES,
    EventBucket,
    Origin,
    StreamColumn,
    WindowBounds,
)
from headwater.sql.plan.translate import window_names


@dataclass(frozen=True)
class Source:
    """One FROM/JOIN item of a SELECT: a stream or table, a TVF over one, or a
    subquery (or CTE) with its query."""

    alias: str
    table: Table | None = None
    tvf: WindowTVF | None = None
    query: exp.Expression | None = None


class Tracer:
    """Column origins and operator partitions of one query."""

    def __init__(self, query: exp.Expression, catalog: Catalog, size: int | None) -> None:
        self.query = query
        self.catalog = catalog
        #: the windows' size (ms; of cumulating windows the shortest, the step: a
        #: window bound is checked against it; None for sessions, of no fixed size)
        self.size = size
        self.ctes = {c.alias_or_name.lower(): c.this for c in query.find_all(exp.CTE)}
        #: reading a join's own condition (its padded side is not NULL there)
        self.in_join = False

    # -- sources
    def sources(self, select: exp.Select) -> list[Source]:
        parts = [select.args.get("from_"), *(select.args.get("joins") or [])]
        return [s for part in parts if part is not None for s in [self._source(part.this)] if s]

    def _source(self, node: exp.Expression) -> Source | None:
        if isinstance(node, WindowTVF):
            table = self.catalog.get(node.this.name, node.this)
            return Source(alias=(node.alias or node.this.name).lower(), table=table, tvf=node)
        if isinstance(node, exp.Table):
            name = node.name.lower()
            alias = node.alias_or_name.lower()
            if name in self.ctes:
                return Source(alias=alias, query=self.ctes[name])
            return Source(alias=alias, table=self.catalog.get(node.name, node))
        if isinstance(node, exp.Subquery):
            return Source(alias=node.alias_or_name.lower(), query=node.this)
        return None

    def source_of(self, tvf: WindowTVF) -> Source:
        """The source a windowing TVF reads (its table's columns)."""
        return Source(alias="", table=self.catalog.get(tvf.this.name, tvf.this))

    def columns(self, source: Source) -> list[str]:
        if source.query is not None:
            return self._output_columns(source.query)
        names = list(source.table.columns) if source.table is not None else []
        if source.tvf is not None:
            names += list(window_names(source.tvf))
        return names

    def _output_columns(self, query: exp.Expression) -> list[str]:
        """:func:`output_names`, a star spelt out as its sources' columns (so that
        ``GROUP BY wstart`` over ``(SELECT * FROM Tumble(...))`` finds the window)."""
        select = query.this if isinstance(query, exp.Subquery) else query
        if not isinstance(select, exp.Select):
            return output_names(query)
        names: list[str] = []
        for item in select.expressions:
            if isinstance(item, exp.Star):
                names += [n.lower() for s in self.sources(select) for n in self.columns(s)]
            else:
                names.append(item.alias_or_name.lower())
        return names

    # -- origins
    def origins(self, column: exp.Column, select: exp.Select) -> frozenset[Origin]:
        """Where ``column`` (read in ``select``, or an enclosing one) comes from."""
        scope: exp.Expression | None = select
        while scope is not None:
            if isinstance(scope, exp.Select):
                found = self._in_select(column, scope)
                if found is not None:
                    return found
            scope = scope.parent
        return frozenset()

    def is_local(self, column: exp.Column, select: exp.Select) -> bool:
        """Whether ``column`` is one of ``select``'s own sources' (not an outer row's)."""
        return self._in_select(column, select) is not None

    def _in_select(self, column: exp.Column, select: exp.Select) -> frozenset[Origin] | None:
        qualifier = column.table.lower()
        name = column.name.lower()
        matches = [
            s
            for s in self.sources(select)
            if (s.alias == qualifier if qualifier else name in map(str.lower, self.columns(s)))
        ]
        if len(matches) != 1:
            return None if not matches else frozenset()
        found = self.of_source(matches[0], name)
        if not self.in_join and matches[0].alias in _padded(select):
            return found | {NULL_SIDE}
        return found

    def of_source(self, source: Source, name: str) -> frozenset[Origin]:
        if source.tvf is not None and name in WINDOW_COLUMNS:
            return frozenset({WindowBounds(WINDOW_EDGES[name])})
        if source.table is not None:
            table = source.table
            if not table.is_stream:
                return frozenset()
            column = next((c for c in table.columns if c.lower() == name), None)
            if column is None:
                return frozenset()
            return frozenset({StreamColumn(table.name.lower(), column, column == table.event_time)})
        return self.output(source.query, name)

    def output(self, query: exp.Expression, name: str) -> frozenset[Origin]:
        """Origins of the output column ``name`` of a subquery (every branch of a
        set operation)."""
        if isinstance(query, exp.SetOperation):
            position = output_names(query).index(name) if name in output_names(query) else -1
            if position < 0:
                return frozenset()
            found: set[Origin] = set()
            for branch in (query.this, query.expression):
                names = output_names(branch)
                mine = self.output(branch, names[position]) if position < len(names) else None
                if not mine:
                    return frozenset()  # a branch's rows come from no column: no key
                found |= mine
            return frozenset(found)
        if isinstance(query, exp.Subquery):
            return self.output(query.this, name)
        if not isinstance(query, exp.Select):
            return frozenset()
        for item in query.expressions:
            if isinstance(item, exp.Star):
                for source in self.sources(query):
                    if name in map(str.lower, self.columns(source)):
                        return self.of_source(source, name)
            elif item.alias_or_name.lower() == name:
                return self.expression(item, query)
        return frozenset()

    def expression(self, node: exp.Expression, select: exp.Select) -> frozenset[Origin]:
        """Origins of a plain column (aliased or in parentheses), or of a bucket of
        an event time; another expression over columns has none (it is coarser
        than its columns: not a key)."""
        while isinstance(node, exp.Alias | exp.Paren):
            node = node.this
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            return self.origins(node, select)
        bucket = buckets.bucket_of(node)
        if bucket is not None:
            return self._bucket(bucket[0], self.expression(bucket[1], select))
        return frozenset()

    def _bucket(self, size: int, of: frozenset[Origin]) -> frozenset[Origin]:
        """The bucket of ``size`` of a value from ``of``: of a stream's event time (a
        TIMESTAMP), or a coarser bucket of a bucket (the day of an hour)."""
        found: set[Origin] = set()
        for origin in of:
            if isinstance(origin, EventBucket) and size % origin.size == 0:
                found.add(EventBucket(origin.table, size))
            elif isinstance(origin, StreamColumn) and origin.event_time and self._timestamp(origin):
                found.add(EventBucket(origin.table, size))
            else:
                return frozenset()
        return frozenset(found)

    def _timestamp(self, column: StreamColumn) -> bool:
        types = self.catalog.get(column.table).arrow_types()
        return pa.types.is_timestamp(types.get(column.column, pa.null()))


def _padded(select: exp.Select) -> set[str]:
    """Aliases of ``select``'s sources that an outer join pads with NULLs."""
    parts = [select.args.get("from_"), *(select.args.get("joins") or [])]
    names = [p.this.alias_or_name.lower() for p in parts if p is not None]
    padded: set[str] = set()
    for i, join in enumerate(parts[1:], start=1):
        side = (join.args.get("side") or "").upper()
        if side in ("LEFT", "FULL"):
            padded.add(names[i])
        if side in ("RIGHT", "FULL"):
            padded.update(names[:i])
    return padded


def output_names(query: exp.Expression) -> list[str]:
    if isinstance(query, exp.SetOperation):
        return output_names(query.this)
    if isinstance(query, exp.Subquery):
        return output_names(query.this)
    if isinstance(query, exp.Select):
        return [e.alias_or_name.lower() for e in query.expressions]
    return []


def conjuncts(node: exp.Expression | None) -> Iterator[exp.Expression]:
    if node is None:
        return
    if isinstance(node, exp.And):
        yield from conjuncts(node.this)
        yield from conjuncts(node.expression)
    elif isinstance(node, exp.Paren):
        yield from conjuncts(node.this)
    else:
        yield node


def reads_stream(node: exp.Expression, tracer: Tracer, seen=frozenset()) -> bool:
    """Whether ``node`` reads a stream (through TVFs, subqueries, CTEs)."""
    for table in node.find_all(exp.Table):
        name = table.name.lower()
        if name in tracer.ctes:
            if name not in seen and reads_stream(tracer.ctes[name], tracer, seen | {name}):
                return True
        elif tracer.catalog.get(table.name, table).is_stream:
            return True
    return False
