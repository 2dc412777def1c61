"""The hybrid model's stream module as source options: K-slack watermarks in SQL.

A source chooses its watermark strategy in ``CREATE TABLE ... WITH (...)``
(docs/sql.md, "Very late data"), or in Python as ``Table(watermark=...)`` /
``hw.from_pandas(..., watermark=...)``:

* ``'watermark' = 'k-slack'`` (``'slack' = '2 seconds'``; default the delay of
  ``WATERMARK FOR``): :class:`~headwater.model.slack.FixedSlack`;
* ``'watermark' = 'mp-k-slack'``: :class:`~headwater.model.slack.MaxDelaySlack`;
* ``'watermark' = 'quality'`` with ``'quality.eps'`` and ``'quality.delta'``:
  :class:`~headwater.sql.plan.quality.QualityWatermark`, which the planner
  turns into a :class:`~headwater.sql.plan.quality.QualityQuery` for the query
  that reads the source (only the query knows its windows and aggregates), and
  :func:`quality_driven` into a :class:`~headwater.model.slack.QualityDriven`
  when the query runs, estimating what the options leave open from the rows.

The option wins over ``WATERMARK FOR``'s delay and over a replay's watermark
lines: ``WATERMARK FOR`` then only names the event-time column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.model.quality import (
    AggregateKind,
    QualityRequirement,
    coefficient_of_variation,
    lambda_thr,
)
from headwater.model.slack import FixedSlack, MaxDelaySlack, QualityDriven
from headwater.model.time import to_millis
from headwater.model.watermarks import WatermarkStrategy
from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import SourceDef
from headwater.sql.plan.catalog import PTIME, Table, event_millis
from headwater.sql.plan.quality import (
    QualityAggregate,
    QualityQuery,
    QualityWatermark,
    not_a_column,
)

#: ``'watermark'`` option values.
WATERMARKS = ("k-slack", "mp-k-slack", "quality")
#: Options of the quality-driven watermark (after ``quality.``) and their defaults.
QUALITY_OPTIONS = {"eps": None, "delta": None, "kp": 0.2, "kd": 4.0}
QUALITY_ESTIMATES = ("window_tuples", "value_cv")
#: The first fraction of a recorded stream (in arrival order) that estimates a
#: window's tuples and the values' variation when the options do not give them
#: (as ``headwater.hybrid.pipeline.estimate_requirement`` does).
WARM_UP = 0.05


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


# ------------------------------------------------------------------ when it runs


def quality_driven(table: Table) -> QualityDriven:
    """The table's planned quality-driven watermark with its estimates: the
    requirement of the query's strictest aggregate (the largest coverage
    threshold meets every other), measured on the query's windows."""
    planned: QualityQuery = table.watermark  # type: ignore[assignment]
    spec = planned.spec
    head = _warm_up(table) if spec.estimated else None
    n = spec.window_tuples or _window_tuples(head, planned, table)
    try:
        requirements = [
            QualityRequirement(
                spec.eps,
                spec.delta,
                agg.kind,
                n,
                spec.value_cv if spec.value_cv is not None else _value_cv(head, agg, table),
            )
            for agg in planned.aggregates
        ]
    except ValueError as exc:
        raise SqlError(f"the quality-driven watermark of {table.name!r}: {exc}") from None
    strictest = max(requirements, key=lambda_thr)
    size, period = planned.size, planned.period
    return QualityDriven(strictest, size, period, kp=spec.kp, kd=spec.kd, follow_up=size)


def _warm_up(table: Table) -> pd.DataFrame:
    """The first :data:`WARM_UP` of a recorded stream in arrival order."""
    frame = table.frame.sort_values(PTIME, kind="stable")
    return frame.iloc[: max(int(len(frame) * WARM_UP), 2)]


def _window_tuples(head: pd.DataFrame, planned: QualityQuery, table: Table) -> int:
    """Tuples per group and window: the warm-up's rate per GROUP BY key times the size."""
    et = event_millis(head[table.event_time])
    span = max(int(np.nanmax(et) - np.nanmin(et)), 1)
    keys = [c for c in planned.group_columns if c in head.columns]
    groups = max(len(head[keys].drop_duplicates()), 1) if keys else 1
    return max(round(len(head) / groups * planned.size / span), 1)


def _value_cv(head: pd.DataFrame, agg: QualityAggregate, table: Table) -> float:
    """The coefficient of variation of the aggregated column (0 where it does not matter)."""
    if agg.kind not in (AggregateKind.SUM, AggregateKind.AVG):
        return 0.0
    if agg.column not in head.columns:
        raise not_a_column(agg, table)
    return coefficient_of_variation(pd.to_numeric(head[agg.column]).to_numpy(np.float64))
