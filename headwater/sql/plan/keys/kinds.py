"""The maintenance key's values: where a partition column comes from (its
origin: a stream column, the window bounds, a NULL-padded side, a bucket of the
event time), what one combining operator partitions by, and the key with its
``explain()`` text (:mod:`headwater.sql.plan.keys`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sqlglot import exp

from headwater.sql.parse.ddl import interval_sql
from headwater.sql.plan import buckets
from headwater.sql.plan.translate import Core

#: Names of the window columns the TVFs add (the paper's, then Flink's).
WINDOW_COLUMNS = frozenset({"wstart", "wend", "window_start", "window_end", "window_time"})


@dataclass(frozen=True)
class StreamColumn:
    """A column of a stream as it arrives (``event_time``: the stream's event time)."""

    table: str
    column: str
    event_time: bool = False


@dataclass(frozen=True)
class WindowBounds:
    """The bounds of a row's window (any of start, end, window_time names the
    window); ``edge`` says which one a column is (``start``, ``end``, ``time``;
    empty in a key: the window)."""

    edge: str = ""


@dataclass(frozen=True)
class NullSide:
    """Read from the NULL-padded side of an outer join: its unmatched rows are NULL
    there, whatever their key, so partitioning by it is by no key."""


@dataclass(frozen=True)
class EventBucket:
    """A bucket of ``size`` ms of stream ``table``'s event time (``CAST(ts AS
    DATE)``: its day), aligned to the epoch."""

    table: str
    size: int


Origin = StreamColumn | WindowBounds | NullSide | EventBucket


@dataclass(frozen=True)
class IntervalBound:
    """An interval join's bound: the rows of stream ``other`` pair with a row of
    stream ``table`` (reference ``alias``, event time ``column``) at ``t`` only
    when their event time is in ``[t - before, t + after]`` (ms, both >= 0).
    Pairs are partitioned by buckets of ``size`` of ``t``: group ``j`` holds
    ``table``'s rows of its bucket (its core) and ``other``'s of
    ``[jS - before, (j+1)S + after)``, the only ones pairing with them."""

    table: str
    alias: str
    column: str
    other: str
    before: int
    after: int

    @property
    def size(self) -> int:
        """The buckets' size: a row of ``other`` is in two or three groups."""
        return max(self.before + self.after, 1)

    def core(self) -> Core:
        """The filter of the group's ``table`` rows to the bucket (translate)."""
        return Core(self.table, self.alias, self.column, self.before, self.after)


WINDOW = WindowBounds()


NULL_SIDE = NullSide()


WINDOW_EDGES = {
    "wstart": "start",
    "window_start": "start",
    "wend": "end",
    "window_end": "end",
    "window_time": "time",
}


class KeyKind(enum.Enum):
    """How a query's groups are formed, from the key's parts."""

    ROW = "row"  #: no combining operator: each row (event time) on its own
    WINDOW = "window"  #: the windows of the windowing TVF
    EVENT_TIME = "event time"  #: each event time on its own
    BUCKET = "event-time bucket"  #: buckets of the event time (its days): tumbling windows
    INTERVAL = "interval join"  #: an interval join's bound: buckets of one side's event time
    COLUMNS = "columns"  #: the values of plain columns of every stream
    NONE = "none"  #: one group holding every row


@dataclass(frozen=True)
class KeyPart:
    """One part of a key: per stream (table name, lower case), the column it is."""

    columns: tuple[tuple[str, str], ...]

    def column_of(self, table: str) -> str:
        return dict(self.columns)[table.lower()]

    def describe(self) -> str:
        names = dict.fromkeys(f"{t}.{c}" for t, c in self.columns)
        return " = ".join(names)


@dataclass(frozen=True)
class Partition:
    """What one combining operator partitions by: its origins, as written (a
    partition item traced to several origins, e.g. through a UNION, lists all)."""

    operator: str
    node: exp.Expression
    items: tuple[frozenset[Origin], ...]
    #: a join bounding a raw stream's event time by a window: how far (ms) past
    #: the window's end its rows join the window (:func:`~.joins.window_reach`)
    reach: int = 0
    #: a join of two streams bounding one's event time by the other's
    #: (:func:`~.joins.interval_bounds`): each way of partitioning its pairs
    intervals: tuple[IntervalBound, ...] = ()


@dataclass(frozen=True)
class MaintenanceKey:
    """The query's key: its kind and, for ``COLUMNS``, the parts (a column of each
    stream per part); ``operators``: the combining operators found."""

    kind: KeyKind
    parts: tuple[KeyPart, ...] = ()
    operators: tuple[str, ...] = ()
    #: the state time-to-live (ms) bounding a key's state the watermark does not
    #: free (:mod:`headwater.sql.plan.ttl`); None: kept while the query runs
    ttl: int | None = None
    #: ``BUCKET``: the buckets' size (ms), and how the query writes the bucket
    bucket: int = 0
    bucket_text: str = ""
    #: ``WINDOW``: how far (ms) past its end a window's group also holds the rows
    #: of a stream joined to it by a closed interval (a row at a window's end is
    #: in two groups, this window's and the next); 0: a row in one window
    reach: int = 0
    #: ``INTERVAL``: the join's bound
    interval: IntervalBound | None = None

    @property
    def freed_by_watermark(self) -> bool:
        """Whether groups complete (their state is freed by the watermark)."""
        return self.kind in (
            KeyKind.ROW,
            KeyKind.WINDOW,
            KeyKind.EVENT_TIME,
            KeyKind.BUCKET,
            KeyKind.INTERVAL,
        )

    @property
    def expiring(self) -> int | None:
        """The TTL (ms) that drops idle keys' state: None where the watermark frees
        the state (a TTL does not change it) or no TTL was asked for."""
        return None if self.freed_by_watermark else self.ttl

    def columns_of(self, table: str) -> tuple[str, ...]:
        """The model key columns of stream ``table`` (``COLUMNS`` only)."""
        return tuple(p.column_of(table) for p in self.parts)

    def describe(self, accumulated: bool | None = False) -> str:
        """The key and how its state grows (``explain()``): a group of a key value
        holds its rows, or with ``accumulated`` (the fast path's combiners) one
        accumulator per aggregate (None: before a path is chosen, neither said)."""
        if self.kind is KeyKind.COLUMNS:
            cols = ", ".join(p.describe() for p in self.parts)
            if self.ttl is not None:
                return f"key {cols}: {self._bounded('a value')}"
            grows = f"key {cols}: state grows with the distinct values of {cols}"
            if accumulated is None:
                return grows
            held = "an accumulator per aggregate for each" if accumulated else "the rows of each"
            return f"{grows}, holding {held}"
        if self.kind is KeyKind.NONE:
            if self.ttl is not None:
                return f"no key (one group of every row): {self._bounded('the group')}"
            return "no key (one group of every row): state grows with the rows"
        what = {
            KeyKind.ROW: "each row on its own (no operator combines rows)",
            KeyKind.WINDOW: "key the window bounds",
            KeyKind.EVENT_TIME: "key the event time",
            KeyKind.BUCKET: f"key the event time's {buckets.describe(self.bucket)} "
            f"({self.bucket_text}, a tumbling window of one {buckets.describe(self.bucket)})",
            KeyKind.INTERVAL: _interval_text(self.interval),
        }[self.kind]
        if self.kind in (KeyKind.WINDOW, KeyKind.BUCKET, KeyKind.INTERVAL) and self.parts:
            what += " and " + ", ".join(p.describe() for p in self.parts)
        if self.kind is KeyKind.WINDOW and self.reach:
            what += (
                f", each reaching {self.reach} ms past its end (the join's closed bound:"
                " a row there is in two windows)"
            )
        unused = f" (state.ttl = {interval_sql(self.ttl)} does not apply)" if self.ttl else ""
        if self.kind is KeyKind.INTERVAL:
            unused = " (a row kept until the watermark passes its upper bound)" + unused
        return f"{what}: state freed by the watermark{unused}"

    def _bounded(self, what: str) -> str:
        ttl = interval_sql(self.ttl or 0)
        return (
            f"state bounded by state.ttl = {ttl} ({what}'s state is dropped, and its result "
            "withdrawn, once no row of it arrived for that long in processing time)"
        )


def _interval_text(bound: IntervalBound | None) -> str:
    if bound is None:
        return ""
    t = f"{bound.alias}.{bound.column}"
    return (
        f"key the interval join's bound: buckets of {interval_sql(bound.size)} of {t}, each "
        f"holding {bound.other}'s rows {_span(bound.before)} before to {_span(bound.after)} after"
    )


def _span(ms: int) -> str:
    return interval_sql(ms) if ms else "0"
