"""The query's key: the origins common to every combining operator's partition
(equal origins joined by the query's equalities), as the window, the event time,
a bucket of it, an interval join's bound, plain columns of every stream, or none
(:mod:`headwater.sql.plan.keys`)."""

from __future__ import annotations

from sqlglot import exp

from headwater.sql.parse.dialect import Headwater
from headwater.sql.plan import buckets
from headwater.sql.plan.catalog import Catalog, Table
from headwater.sql.plan.keys.kinds import (
    NULL_SIDE,
    WINDOW,
    EventBucket,
    IntervalBound,
    KeyKind,
    KeyPart,
    MaintenanceKey,
    Origin,
    StreamColumn,
    WindowBounds,
)
from headwater.sql.plan.keys.operators import partitions


class _Classes:
    """Origins equal by the query's equalities (union-find)."""

    def __init__(self) -> None:
        self.parent: dict[Origin, Origin] = {}

    def find(self, origin: Origin) -> Origin:
        self.parent.setdefault(origin, origin)
        while self.parent[origin] != origin:
            origin = self.parent[origin]
        return origin

    def union(self, origins: frozenset[Origin]) -> None:
        roots = [self.find(o) for o in origins]
        for other in roots[1:]:
            self.parent[self.find(other)] = self.find(roots[0])

    def members(self, root: Origin) -> set[Origin]:
        return {o for o in self.parent if self.find(o) == root}


def _stream_refs(query: exp.Expression, catalog: Catalog) -> dict[str, Table]:
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    refs = [t for t in query.find_all(exp.Table) if t.name and t.name.lower() not in ctes]
    tables = (catalog.get(t.name, t) for t in refs)
    return {t.name.lower(): t for t in tables if t.is_stream}


def derive_key(
    query: exp.Expression, catalog: Catalog, windowed: bool, size: int | None = None
) -> MaintenanceKey:
    """The maintenance key of ``query``. ``windowed``: every stream reference is
    read through a windowing TVF or bounded by a window (so that each stream row
    belongs to the windows of its event time); ``size``: the windows' (ms)."""
    found = partitions(query, catalog, size)
    names = tuple(dict.fromkeys(p.operator for p in found))
    if not found:
        return MaintenanceKey(KeyKind.ROW)
    classes = _Classes()
    items = [
        [_window_as_one(item) for item in p.items if item and NULL_SIDE not in item] for p in found
    ]
    for mine in items:
        for item in mine:
            classes.union(item)
    roots = [{classes.find(next(iter(item))) for item in mine} for mine in items]
    common = set.intersection(*roots)
    streams = _stream_refs(query, catalog)
    members = [classes.members(c) for c in common]
    parts = sorted(
        (p for p in (_part(m, streams) for m in members) if p is not None),
        key=lambda p: p.columns,
    )
    if windowed and any(WINDOW in m for m in members):
        # the columns, if any, spread a window's groups over keys (Hop windows)
        return MaintenanceKey(KeyKind.WINDOW, tuple(parts), names)
    if any(_all_event_times(p, streams) for p in parts):
        return MaintenanceKey(KeyKind.EVENT_TIME, operators=names)
    bucket = max((_bucket(m, streams) for m in members), default=0)
    bucket = bucket or _nested_bucket(
        [[classes.members(r) for r in mine] for mine in roots], streams
    )
    if bucket:
        text = _bucket_text([*(p.node for p in found), query], bucket)
        return MaintenanceKey(KeyKind.BUCKET, tuple(parts), names, bucket=bucket, bucket_text=text)
    interval = None if windowed else _interval(found, classes, query, catalog)
    if interval is not None:
        return MaintenanceKey(KeyKind.INTERVAL, tuple(parts), names, interval=interval)
    if parts:
        return MaintenanceKey(KeyKind.COLUMNS, tuple(parts), names)
    return MaintenanceKey(KeyKind.NONE, operators=names)


def _interval(found, classes: _Classes, query: exp.Expression, catalog: Catalog):
    """The bound of the query's one interval join when its pairs can be grouped by
    buckets of one side's event time: the query reads the two streams once each
    (in that join), and every other combining operator partitions by that event
    time (its class holds no other column), so that each of its partitions lies
    in one bucket; else None (the key stays columns or none, state grows)."""
    joins = [p for p in found if p.intervals]
    if len(joins) != 1 or len(_stream_tables(query, catalog)) != 2:
        return None
    for bound in joins[0].intervals:
        if all(_by_event_time(p, classes, bound) for p in found if p is not joins[0]):
            return bound
    return None


def _stream_tables(query: exp.Expression, catalog: Catalog) -> list[exp.Table]:
    """Every reference of a stream in the query (a CTE's once)."""
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    refs = [t for t in query.find_all(exp.Table) if t.name and t.name.lower() not in ctes]
    return [t for t in refs if catalog.get(t.name, t).is_stream]


def _by_event_time(partition, classes: _Classes, bound: IntervalBound) -> bool:
    """Whether ``partition`` has an item of ``bound``'s bucketed event time alone."""
    et = StreamColumn(bound.table, bound.column, True)
    for item in partition.items:
        if et not in item:
            continue
        members = classes.members(classes.find(et))
        if members <= {et}:
            return True
    return False


def _window_as_one(item: frozenset[Origin]) -> frozenset[Origin]:
    """A partition item with every window bound as the window (one class)."""
    return frozenset(WINDOW if isinstance(o, WindowBounds) else o for o in item)


def _part(members: set[Origin], streams: dict[str, Table]) -> KeyPart | None:
    """A key part: exactly one column of every stream in the class (else rows of
    a stream could not be given one group)."""
    columns = [m for m in members if isinstance(m, StreamColumn)]
    chosen = []
    for name in sorted(streams):
        mine = {m.column for m in columns if m.table == name}
        if len(mine) != 1:
            return None
        chosen.append((name, mine.pop()))
    return KeyPart(tuple(chosen)) if chosen else None


def _bucket(members: set[Origin], streams: dict[str, Table]) -> int:
    """The size of the buckets of a class of buckets only, one of every stream's
    event time, all of one size (0: not such a class)."""
    found = {(m.table, m.size) for m in members if isinstance(m, EventBucket)}
    if len(found) != len(members) or {t for t, _ in found} != set(streams):
        return 0
    sizes = {s for _, s in found}
    return sizes.pop() if len(sizes) == 1 else 0


def _nested_bucket(operators: list[list[set[Origin]]], streams: dict[str, Table]) -> int:
    """Buckets of several sizes (an hour inside, the day outside): when every
    operator partitions by a bucket of every stream's event time, and each
    operator's finest bucket divides the coarsest of them, a group of the coarsest
    bucket holds every row of each operator's partitions (a day's rows hold all
    its hours): its size, else 0. ``operators``: each one's classes of origins."""
    finest = []
    for classes in operators:
        sizes = [size for size in (_bucket(c, streams) for c in classes) if size]
        if not sizes:
            return 0
        finest.append(min(sizes))
    coarsest = max(finest, default=0)
    return coarsest if all(coarsest % size == 0 for size in finest) else 0


def _bucket_text(nodes: list[exp.Expression], size: int) -> str:
    """How the query writes its bucket key: the first bucket expression of that
    size in the combining operators, else in the query."""
    for node in (n for top in nodes for n in top.walk()):
        bucket = buckets.bucket_of(node)
        if bucket is not None and bucket[0] == size:
            return buckets.written(node, Headwater)
    return buckets.describe(size)


def _all_event_times(part: KeyPart, streams: dict[str, Table]) -> bool:
    return all(streams[t].event_time == c for t, c in part.columns)
