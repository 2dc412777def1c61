"""The quality-driven watermark of a query, as planned: which windows and
aggregates it must bound, checked against the query's text, no row read.

A source asks for it with ``'watermark' = 'quality'`` (:class:`QualityWatermark`);
only the query that reads the source knows its windows and aggregates, so the
planner turns the request into a :class:`QualityQuery`. The runner then
estimates what the request leaves open (a window's tuples, the values' variation)
from the stream's first rows, when it runs
(:func:`headwater.sql.execute.hybrid.quality_driven`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot import exp

from headwater.model.quality import AggregateKind
from headwater.model.watermarks import WatermarkStrategy
from headwater.model.windows import FixedWindows, SlidingWindows, WindowFn
from headwater.sql.errors import SqlError, position
from headwater.sql.plan.catalog import Table

AGGREGATE_KINDS = {
    exp.Sum: AggregateKind.SUM,
    exp.Count: AggregateKind.COUNT,
    exp.Avg: AggregateKind.AVG,
    exp.Min: AggregateKind.MIN,
    exp.Max: AggregateKind.MAX,
}


@dataclass(frozen=True)
class QualityWatermark(WatermarkStrategy):
    """A quality-driven K-slack for whichever query reads the source:
    ``P(relative error >= eps) <= delta`` per window of the query, for its
    aggregate. ``window_tuples`` (tuples per group and window) and ``value_cv``
    (the aggregated values' coefficient of variation) are estimated from the
    first 5% of a recorded stream when not given."""

    eps: float
    delta: float
    kp: float = 0.2
    kd: float = 4.0
    window_tuples: int | None = None
    value_cv: float | None = None

    def describe(self) -> str:
        return f"quality-driven K-slack (eps={self.eps}, delta={self.delta}), for the query"

    @property
    def estimated(self) -> bool:
        """Whether running it needs estimates from the stream's rows."""
        return self.window_tuples is None or self.value_cv is None


@dataclass(frozen=True)
class QualityAggregate:
    """One aggregate the watermark bounds: its kind, the column it reads (None
    for COUNT(*)), and its place in the text for an error at run time."""

    kind: AggregateKind
    column: str | None
    text: str
    line: int | None
    col: int | None


@dataclass(frozen=True)
class QualityQuery(WatermarkStrategy):
    """A :class:`QualityWatermark` planned for one query: its windows (``size``,
    ``period``, ms), its aggregates and its GROUP BY columns."""

    spec: QualityWatermark
    size: int
    period: int
    aggregates: tuple[QualityAggregate, ...]
    group_columns: tuple[str, ...]

    def describe(self) -> str:
        return self.spec.describe()


def plan_quality(
    query: exp.Expression, streams: tuple[Table, ...], window_fn: WindowFn | None, at: exp.Expr
) -> tuple[Table, ...]:
    """``streams`` with each :class:`QualityWatermark` planned for the query
    (copies: a table may serve queries of other windows). ``window_fn``: the
    query's TVF windows (None without a TVF); ``at``: where to point an error."""
    return tuple(
        replace(table, watermark=_planned(query, table, window_fn, at), watermarks=None)
        if isinstance(table.watermark, QualityWatermark)
        else table
        for table in streams
    )


def _planned(
    query: exp.Expression, table: Table, fn: WindowFn | None, at: exp.Expr
) -> QualityQuery:
    spec: QualityWatermark = table.watermark  # type: ignore[assignment]
    line, col = position(at)
    if not isinstance(fn, FixedWindows | SlidingWindows):
        raise SqlError(
            f"the quality-driven watermark of {table.name!r} measures the coverage of the "
            "query's windows: it needs Tumble or Hop windows",
            line,
            col,
            "Window the stream with Tumble/Hop, or use 'watermark' = 'mp-k-slack'",
        )
    if fn.offset:
        raise SqlError(
            "the quality-driven watermark measures windows aligned to 0: remove the offset",
            line,
            col,
        )
    aggregates = _aggregates(query)
    if not aggregates:
        raise SqlError(
            f"the quality-driven watermark of {table.name!r} bounds the error of an "
            "aggregate (SUM, COUNT, AVG, MIN, MAX): the query has none",
            line,
            col,
            "Use 'watermark' = 'k-slack' or 'mp-k-slack'",
        )
    if spec.estimated and not table.is_replay:
        raise SqlError(
            f"the quality-driven watermark of {table.name!r} cannot estimate a window's "
            "tuples and the values' variation from a stream it does not hold",
            hint="Add 'quality.window_tuples' and 'quality.value_cv' to its options",
        )
    if spec.value_cv is None:
        _check_value_columns(aggregates, table)
    groups = sorted(
        {
            c.name
            for group in query.find_all(exp.Group)
            for c in group.find_all(exp.Column)
            if c.name != table.event_time
        }
    )
    period = getattr(fn, "period", fn.size)
    return QualityQuery(spec, fn.size, period, tuple(aggregates), tuple(groups))


def _aggregates(query: exp.Expression) -> list[QualityAggregate]:
    """The query's aggregates (not window functions); SqlError for one the
    requirement cannot speak for."""
    out = []
    for node in query.find_all(exp.AggFunc):
        if node.find_ancestor(exp.Window) is not None:
            continue
        kind = AGGREGATE_KINDS.get(type(node))
        if kind is None:
            raise SqlError(
                f"the quality-driven watermark bounds SUM, COUNT, AVG, MIN and MAX, not "
                f"{node.sql()}",
                *position(node),
                "Use 'watermark' = 'k-slack' or 'mp-k-slack' for this query",
            )
        arg = node.this
        column = arg.name if isinstance(arg, exp.Column) else None
        out.append(QualityAggregate(kind, column, arg.sql() if arg else "*", *position(node)))
    return out


def _check_value_columns(aggregates: list[QualityAggregate], table: Table) -> None:
    """The variation of SUM's and AVG's values is estimated from a column."""
    for agg in aggregates:
        if agg.kind in (AggregateKind.SUM, AggregateKind.AVG) and agg.column is None:
            raise not_a_column(agg, table)


def not_a_column(agg: QualityAggregate, table: Table) -> SqlError:
    """The values of ``agg`` are no column of ``table``: no variation to estimate."""
    return SqlError(
        f"cannot estimate the variation of {agg.text} for the quality-driven "
        f"watermark of {table.name!r}: it is not a column of the table",
        agg.line,
        agg.col,
        "Add 'quality.value_cv' to its options",
    )
