"""The logical plan of a windowed aggregation: what every front end builds and
every runner executes.

The fluent API (``hw.from_pandas`` / ``hw.from_spark``), the transcript runner,
and next the SQL compiler and the hybrid path all describe a pipeline as one
:class:`WindowedAggregationPlan`. It is validated once, against the input's
schema, when it is built: a runner consumes it without checking it again. Every
problem found raises :class:`PlanError`, whose message names the column or
argument, what was found, and how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from headwater.model.combiners import CombineFn
from headwater.model.schema import (
    RESERVED_NAMES,
    Field,
    dead_letter_fields,
    pane_fields,
)
from headwater.model.strategy import WindowingStrategy
from headwater.model.types import INT64, OBJECT, TIMESTAMP, DataType
from headwater.model.watermarks import Punctuated, WatermarkStrategy


class PlanError(ValueError):
    """A pipeline that cannot run as described.

    ``argument`` names the column or argument at fault, ``found`` what was
    there, ``fix`` how to repair it; the message carries all three.
    """

    def __init__(
        self, problem: str, *, argument: str | None = None, found: Any = None, fix: str = ""
    ) -> None:
        self.problem, self.argument, self.found, self.fix = problem, argument, found, fix
        message = problem
        if found is not None:
            message += f" (found: {found})"
        if fix:
            message += f". {fix}"
        super().__init__(message)


class NullEventTime(str, Enum):
    """What happens to a row whose event time is null."""

    #: left out of every window, written to the dead letters (reason ``null_event_time``)
    DEAD_LETTER = "dead_letter"
    #: the query fails, naming the column
    ERROR = "error"


def null_event_time_error(column: str, rows: int | None = None) -> ValueError:
    """The error of a query that asked to fail on a null event time (every runner's)."""
    count = "" if rows is None else f" ({rows} rows)"
    return ValueError(
        f"headwater: null event time in column {column!r}{count}; pass "
        "on_null_event_time='dead_letter' to route such rows to the dead letters instead"
    )


class LateData(str, Enum):
    """What happens to an element beyond its window's allowed lateness."""

    #: counted and written to the dead letters (reason ``late`` or ``closed``)
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class Schema:
    """The input's columns and their logical types, in order."""

    fields: tuple[Field, ...]

    @classmethod
    def of(cls, columns: Mapping[str, DataType] | Iterable[Field]) -> Schema:
        if isinstance(columns, Mapping):
            return cls(tuple(Field(n, t) for n, t in columns.items()))
        return cls(tuple(columns))

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def type_of(self, column: str, *, role: str) -> DataType:
        for f in self.fields:
            if f.name == column:
                return f.type
        raise PlanError(
            f"{role} {column!r} is not a column of the input",
            argument=column,
            found=f"columns {self.names}",
            fix="Check the spelling, or add the column before building the pipeline",
        )


@dataclass(frozen=True)
class Aggregate:
    """One output: ``combine_fn`` over the input column ``column`` (``None``: no input)."""

    name: str
    combine_fn: CombineFn
    column: str | None
    input_type: DataType | None
    output_type: DataType


@dataclass(frozen=True)
class Capabilities:
    """What a runner executes beyond what every runner does (any window function
    and combiner: where an engine cannot express one natively, it runs the
    model's own code). Each runner declares one."""

    runner: str
    #: the watermark strategies it executes on an unbounded input
    watermarks: tuple[type[WatermarkStrategy], ...]
    #: whether every output needs an engine type (a Python object output cannot run)
    output_types_known: bool = False


@dataclass(frozen=True)
class WindowedAggregationPlan:
    """A keyed, windowed aggregation (see :func:`build_plan`, which validates it)."""

    schema: Schema
    keys: tuple[str, ...]
    event_time: str
    event_time_type: DataType
    watermark: WatermarkStrategy | None
    windowing: WindowingStrategy
    aggregations: tuple[Aggregate, ...]
    bounded: bool
    on_null_event_time: NullEventTime = NullEventTime.DEAD_LETTER
    on_late_data: LateData = LateData.DEAD_LETTER

    @property
    def core_aggregations(self) -> dict[str, tuple[CombineFn, str | None]]:
        """The aggregations in the reducer's ``{name: (combine_fn, column)}`` form."""
        return {a.name: (a.combine_fn, a.column) for a in self.aggregations}

    @property
    def input_columns(self) -> tuple[str, ...]:
        """Columns the aggregations read, each once, in order."""
        cols = [a.column for a in self.aggregations if a.column is not None]
        return tuple(dict.fromkeys(cols))

    def key_fields(self) -> tuple[Field, ...]:
        return tuple(Field(k, self.schema.type_of(k, role="key")) for k in self.keys)

    def pane_fields(self) -> tuple[Field, ...]:
        outputs = tuple(Field(a.name, a.output_type) for a in self.aggregations)
        return pane_fields(self.key_fields(), outputs)

    def dead_letter_fields(self) -> tuple[Field, ...]:
        inputs = tuple(Field(c, self.schema.type_of(c, role="input")) for c in self.input_columns)
        return dead_letter_fields(self.key_fields(), inputs)


def build_plan(
    schema: Schema,
    *,
    keys: Iterable[str],
    event_time: str,
    windowing: WindowingStrategy,
    aggregations: Mapping[str, tuple[CombineFn, str | None]],
    bounded: bool,
    watermark: WatermarkStrategy | None = None,
    on_null_event_time: NullEventTime | str = NullEventTime.DEAD_LETTER,
    on_late_data: LateData | str = LateData.DEAD_LETTER,
    capabilities: Capabilities | None = None,
) -> WindowedAggregationPlan:
    """Validate a windowed aggregation against ``schema`` and return its plan.

    ``capabilities``: the runner that will execute it; a combination it does
    not support is refused here, before anything runs.
    """
    keys = tuple(keys)
    et_type = _event_time_type(schema, event_time)
    seen: set[str] = set()
    for k in keys:
        schema.type_of(k, role="key column")
        _check_name(k, "key column", seen)
    aggs = tuple(_aggregate(schema, name, spec, seen) for name, spec in aggregations.items())
    if not aggs:
        raise PlanError(
            "a windowed aggregation needs at least one aggregation",
            argument="agg",
            fix="Name one, e.g. .agg(n=hw.count())",
        )
    if not isinstance(windowing, WindowingStrategy):
        raise PlanError(
            "the windowing is not a WindowingStrategy",
            argument="window",
            found=repr(windowing),
            fix="Use .window(hw.FixedWindows(...), trigger=..., ...)",
        )
    check_windowing(windowing)
    if not bounded and watermark is None:
        raise PlanError(
            "an unbounded input needs a watermark strategy",
            argument="watermark",
            fix="Pass watermark='10 seconds' (bounded out-of-orderness), or "
            "watermark='punctuated' for a source with a watermark_ms column",
        )
    if isinstance(watermark, Punctuated) and not bounded:
        wm_type = schema.type_of(watermark.column, role="watermark column")
        if wm_type not in (INT64, TIMESTAMP):
            raise PlanError(
                f"watermark column {watermark.column!r} has type {wm_type}",
                argument=watermark.column,
                found=str(wm_type),
                fix="A punctuated watermark is epoch milliseconds (an integer) or a timestamp",
            )
    plan = WindowedAggregationPlan(
        schema=schema,
        keys=keys,
        event_time=event_time,
        event_time_type=et_type,
        watermark=watermark,
        windowing=windowing,
        aggregations=aggs,
        bounded=bounded,
        on_null_event_time=_enum(NullEventTime, on_null_event_time, "on_null_event_time"),
        on_late_data=_enum(LateData, on_late_data, "on_late_data"),
    )
    if capabilities is not None:
        _check_runner(plan, capabilities)
    return plan


def check_windowing(windowing: WindowingStrategy) -> None:
    """A windowing whose durations make no sense is refused before anything runs: a
    negative allowed lateness would drop rows that arrive on time."""
    if windowing.allowed_lateness < 0:
        raise PlanError(
            "allowed_lateness must not be negative: a negative lateness drops rows that "
            "arrive before their window closes",
            argument="allowed_lateness",
            found=f"{windowing.allowed_lateness} ms",
            fix="Pass allowed_lateness=0 (drop what arrives after the watermark passes the "
            "window's end) or a positive duration",
        )


def _event_time_type(schema: Schema, column: str) -> DataType:
    t = schema.type_of(column, role="event-time column")
    if t not in (TIMESTAMP, INT64):
        raise PlanError(
            f"event-time column {column!r} has type {t}, which is not an event time",
            argument=column,
            found=str(t),
            fix="Accepted: a timestamp, or an integer column of epoch milliseconds; "
            f"convert it first (pandas: pd.to_datetime(df[{column!r}]); Spark: "
            f"F.col({column!r}).cast('timestamp') or F.to_timestamp(...))",
        )
    return t


def _check_name(name: str, role: str, seen: set[str]) -> None:
    if name in RESERVED_NAMES:
        raise PlanError(
            f"{role} {name!r} clashes with an output column of a windowed aggregation",
            argument=name,
            fix=f"Rename it; these names are reserved: {sorted(RESERVED_NAMES)}",
        )
    if name.startswith("__hw_"):
        raise PlanError(f"{role} {name!r}: names starting with '__hw_' are reserved")
    if name in seen:
        raise PlanError(f"duplicate output column {name!r}", argument=name, fix="Rename one")
    seen.add(name)


def _aggregate(schema: Schema, name: str, spec: Any, seen: set[str]) -> Aggregate:
    fn, column = spec
    _check_name(name, "aggregation", seen)
    if not isinstance(fn, CombineFn):
        raise PlanError(
            f"aggregation {name!r} is not a combiner",
            argument=name,
            found=repr(fn),
            fix="Use hw.sum(...), hw.count(), ... or a CombineFn",
        )
    in_type = None if column is None else schema.type_of(column, role=f"input of {name!r}")
    reason = fn.input_error(in_type)
    if reason is not None:
        raise PlanError(
            f"aggregation {name!r}: {fn!r} cannot take column {column!r} of type {in_type}"
            f" ({reason})",
            argument=column,
            found=str(in_type),
            fix=f"Aggregate a column of another type, or cast {column!r} first",
        )
    try:
        out_type = fn.output_type(in_type)
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise PlanError(
            f"aggregation {name!r}: the output type of {fn!r} is unknown",
            argument=name,
            found=str(exc),
            fix="Declare it on the combiner (class attribute `output = FLOAT64`, a type "
            "from headwater.model.types)",
        ) from exc
    return Aggregate(name, fn, column, in_type, out_type)


def _check_runner(plan: WindowedAggregationPlan, caps: Capabilities) -> None:
    if plan.watermark is not None and not plan.bounded:
        if not isinstance(plan.watermark, caps.watermarks):
            supported = ", ".join(t.__name__ for t in caps.watermarks)
            raise PlanError(
                f"the {caps.runner} runner cannot execute the watermark strategy "
                f"{plan.watermark.describe()}",
                argument="watermark",
                found=type(plan.watermark).__name__,
                fix=f"Use one it supports: {supported}",
            )
    if caps.output_types_known:
        for a in plan.aggregations:
            if a.output_type == OBJECT:
                raise PlanError(
                    f"aggregation {a.name!r}: the {caps.runner} runner needs the type of "
                    f"{a.combine_fn!r}'s output, which is a Python object",
                    argument=a.name,
                    fix="Declare it on the combiner (class attribute `output = ...`, a type "
                    "from headwater.model.types)",
                )


def _enum(kind: type[Enum], value: Any, argument: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise PlanError(
            f"{argument} must be one of {choices}", argument=argument, found=repr(value)
        ) from None
