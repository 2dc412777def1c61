"""The hybrid model's stream module as source options: K-slack watermarks in SQL.

A source chooses its watermark strategy in ``CREATE TABLE ... WITH (...)``
(docs/sql.md, "Very late data"), or in Python as ``Table(watermark=...)`` /
``hw.from_pandas(..., watermark=...)``:

* ``'watermark' = 'k-slack'`` (``'slack' = '2 seconds'``; default the delay of
  ``WATERMARK FOR``): :class:`~headwater.model.slack.FixedSlack`;
* ``'watermark' = 'mp-k-slack'``: :class:`~headwater.model.slack.MaxDelaySlack`;
* ``'watermark' = 'quality'`` with ``'quality.eps'`` and ``'quality.delta'``:
  :class:`QualityWatermark`, which the planner turns into a
  :class:`~headwater.model.slack.QualityDriven` for the query that reads the
  source, since only the query knows its windows and aggregates.

The option wins over ``WATERMARK FOR``'s delay and over a replay's watermark
lines: ``WATERMARK FOR`` then only names the event-time column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from sqlglot import exp

from headwater.model.quality import (
    AggregateKind,
    QualityRequirement,
    coefficient_of_variation,
    lambda_thr,
)
from headwater.model.slack import FixedSlack, MaxDelaySlack, QualityDriven
from headwater.model.time import to_millis
from headwater.model.watermarks import WatermarkStrategy
from headwater.model.windows import FixedWindows, SlidingWindows, WindowFn
from headwater.sql.catalog import PTIME, Table, event_millis
from headwater.sql.ddl import SourceDef
from headwater.sql.errors import SqlError, position

#: ``'watermark'`` option values.
WATERMARKS = ("k-slack", "mp-k-slack", "quality")
#: Options of the quality-driven watermark (after ``quality.``) and their defaults.
QUALITY_OPTIONS = {"eps": None, "delta": None, "kp": 0.2, "kd": 4.0}
QUALITY_ESTIMATES = ("window_tuples", "value_cv")
#: The first fraction of a recorded stream (in arrival order) that estimates a
#: window's tuples and the values' variation when the options do not give them
#: (as ``headwater.hybrid.pipeline.estimate_requirement`` does).
WARM_UP = 0.05
_KINDS = {
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


def _number(d: SourceDef, key: str, cast=float):
    try:
        return cast(d.options[key])
    except ValueError:
        raise SqlError(
            f"table {d.name!r}: option {key!r} = {d.options[key]!r} is not a number", d.line
        ) from None


def _duration(d: SourceDef, key: str) -> int:
    try:
        return to_millis(d.options[key])
    except ValueError:
        raise SqlError(
            f"table {d.name!r}: cannot read option {key!r} = {d.options[key]!r} as a duration",
            d.line,
            None,
            "Write e.g. '2 seconds' or '500 ms'",
        ) from None


def watermark_option(d: SourceDef) -> WatermarkStrategy | None:
    """The strategy the ``'watermark'`` option chooses (None without one)."""
    quality = sorted(k for k in d.options if k.startswith("quality."))
    unknown = [k for k in quality if k[8:] not in (*QUALITY_OPTIONS, *QUALITY_ESTIMATES)]
    if unknown:
        known = ", ".join(f"'quality.{k}'" for k in (*QUALITY_OPTIONS, *QUALITY_ESTIMATES))
        raise SqlError(f"table {d.name!r}: unknown option {unknown[0]!r}", d.line, None, known)
    kind = d.options.get("watermark", "").strip().lower()
    if not kind:
        stray = quality or [k for k in ("slack",) if k in d.options]
        if stray:
            raise SqlError(
                f"table {d.name!r}: option {stray[0]!r} needs a 'watermark' option",
                d.line,
                None,
                "Add 'watermark' = 'quality' (quality.*) or 'watermark' = 'k-slack' (slack)",
            )
        return None
    if kind not in WATERMARKS:
        raise SqlError(
            f"table {d.name!r}: unknown watermark {kind!r}",
            d.line,
            None,
            f"Use one of {', '.join(repr(w) for w in WATERMARKS)}",
        )
    if "slack" in d.options and kind != "k-slack":
        raise SqlError(f"table {d.name!r}: 'slack' is for 'watermark' = 'k-slack'", d.line)
    if quality and kind != "quality":
        raise SqlError(f"table {d.name!r}: {quality[0]!r} is for 'watermark' = 'quality'", d.line)
    if kind == "k-slack":
        slack = _duration(d, "slack") if "slack" in d.options else d.watermark_delay_ms or 0
        return FixedSlack(slack)
    if kind == "mp-k-slack":
        return MaxDelaySlack()
    missing = [f"quality.{k}" for k in ("eps", "delta") if f"quality.{k}" not in d.options]
    if missing:
        raise SqlError(
            f"table {d.name!r}: the quality-driven watermark needs {' and '.join(missing)}",
            d.line,
            None,
            "Add e.g. 'quality.eps' = '0.05', 'quality.delta' = '0.05'",
        )
    values = {
        k: _number(d, f"quality.{k}") if f"quality.{k}" in d.options else default
        for k, default in QUALITY_OPTIONS.items()
    }
    if "quality.window_tuples" in d.options:
        values["window_tuples"] = _number(d, "quality.window_tuples", int)
    if "quality.value_cv" in d.options:
        values["value_cv"] = _number(d, "quality.value_cv")
    return QualityWatermark(**values)


# ------------------------------------------------------------------ per query


def resolve_watermarks(
    query: exp.Expression, streams: tuple[Table, ...], window_fn: WindowFn | None, at: exp.Expr
) -> tuple[Table, ...]:
    """``streams`` with each :class:`QualityWatermark` made the query's
    :class:`QualityDriven` (copies: a table may serve queries of other windows).
    ``window_fn``: the query's TVF windows (None without a TVF); ``at``: where to
    point an error."""
    out = []
    for table in streams:
        if isinstance(table.watermark, QualityWatermark):
            strategy = _quality_driven(query, table, window_fn, at)
            table = replace(table, watermark=strategy, watermarks=None)
        out.append(table)
    return tuple(out)


def _quality_driven(
    query: exp.Expression, table: Table, fn: WindowFn | None, at: exp.Expr
) -> QualityDriven:
    """The requirement of the query's strictest aggregate (the largest coverage
    threshold meets every other), measured on the query's windows."""
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
    size, period = fn.size, getattr(fn, "period", fn.size)
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
    head = _warm_up(table, spec)
    n = spec.window_tuples or _window_tuples(head, query, table, size)
    try:
        requirements = [
            QualityRequirement(
                spec.eps,
                spec.delta,
                kind,
                n,
                spec.value_cv if spec.value_cv is not None else _value_cv(head, node, kind, table),
            )
            for node, kind in aggregates
        ]
    except ValueError as exc:
        raise SqlError(f"the quality-driven watermark of {table.name!r}: {exc}") from None
    strictest = max(requirements, key=lambda_thr)
    return QualityDriven(strictest, size, period, kp=spec.kp, kd=spec.kd, follow_up=size)


def _aggregates(query: exp.Expression) -> list[tuple[exp.AggFunc, AggregateKind]]:
    """The query's aggregates (not window functions); SqlError for one the
    requirement cannot speak for."""
    out = []
    for node in query.find_all(exp.AggFunc):
        if node.find_ancestor(exp.Window) is not None:
            continue
        kind = _KINDS.get(type(node))
        if kind is None:
            raise SqlError(
                f"the quality-driven watermark bounds SUM, COUNT, AVG, MIN and MAX, not "
                f"{node.sql()}",
                *position(node),
                "Use 'watermark' = 'k-slack' or 'mp-k-slack' for this query",
            )
        out.append((node, kind))
    return out


def _warm_up(table: Table, spec: QualityWatermark) -> pd.DataFrame | None:
    """The first :data:`WARM_UP` of a recorded stream in arrival order (None when
    both estimates are given)."""
    if spec.window_tuples is not None and spec.value_cv is not None:
        return None
    if table.frame is None or PTIME not in table.frame.columns:
        raise SqlError(
            f"the quality-driven watermark of {table.name!r} cannot estimate a window's "
            "tuples and the values' variation from a stream it does not hold",
            hint="Add 'quality.window_tuples' and 'quality.value_cv' to its options",
        )
    frame = table.frame.sort_values(PTIME, kind="stable")
    return frame.iloc[: max(int(len(frame) * WARM_UP), 2)]


def _window_tuples(head: pd.DataFrame, query: exp.Expression, table: Table, size: int) -> int:
    """Tuples per group and window: the warm-up's rate per GROUP BY key times the size."""
    et = event_millis(head[table.event_time])
    span = max(int(np.nanmax(et) - np.nanmin(et)), 1)
    keys = sorted(
        {
            c.name
            for group in query.find_all(exp.Group)
            for c in group.find_all(exp.Column)
            if c.name in head.columns and c.name != table.event_time
        }
    )
    groups = max(len(head[keys].drop_duplicates()), 1) if keys else 1
    return max(round(len(head) / groups * size / span), 1)


def _value_cv(head: pd.DataFrame, node: exp.AggFunc, kind: AggregateKind, table: Table) -> float:
    """The coefficient of variation of the aggregated column (0 where it does not matter)."""
    if kind not in (AggregateKind.SUM, AggregateKind.AVG):
        return 0.0
    arg = node.this
    if not (isinstance(arg, exp.Column) and arg.name in head.columns):
        raise SqlError(
            f"cannot estimate the variation of {arg.sql()} for the quality-driven "
            f"watermark of {table.name!r}: it is not a column of the table",
            *position(node),
            "Add 'quality.value_cv' to its options",
        )
    return coefficient_of_variation(pd.to_numeric(head[arg.name]).to_numpy(np.float64))
