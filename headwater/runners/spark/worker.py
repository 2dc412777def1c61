"""What the Python workers of a streaming query share: the packet layout and the
worker plan (pickled with cloudpickle into the packer and the stateful processor).

The driver (:mod:`headwater.runners.spark.streaming`) builds one
:class:`WorkerPlan` from the validated logical plan; the packer
(:mod:`~headwater.runners.spark.packing`) and each shard's step
(:mod:`~headwater.runners.spark.shard_logic`) read only this.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import types as T

from headwater.model.combiners import CombineFn
from headwater.model.keep import TopRows
from headwater.model.strategy import WindowingStrategy

#: Set (before the SparkSession starts) to a directory to cProfile the Python side
#: of the runner: each worker process writes ``<dir>/<role>-<pid>.prof``.
PROFILE_ENV = "HEADWATER_PROFILE_DIR"

# Columns of the projected rows and of a packet's Arrow table.
SHARD = "__hw_shard"
KEY = "__hw_key"
TS = "__hw_ts"
KIND = "__hw_kind"
WM = "__hw_wm"
PROC = "__hw_proc"
N = "__hw_n"  # elements per (lifted) row
ORDER = "__hw_order"  # arrival order within a processing time (a shard-derived watermark)
#: Kinds of control rows; ``clock`` marks a step that fires processing-time timers,
#: ``end`` the end of the input (the watermark goes to the end of time).
CONTROL_KINDS = pa.array(["tick", "clock", "end"], pa.string())
#: Operator output columns of a plan whose watermark each shard derives (K-slack): the
#: processing time of the step that made a row, and on rows of kind ``'watermark'``
#: the shard (its index), its watermark after the step and the slack ``K``.
STEP_TIME = "__hw_step_time"
SHARD_NO = "__hw_shard_no"
SHARD_WM = "__hw_shard_wm"
SHARD_SLACK = "__hw_shard_slack"
#: Prefix of the operator's output columns that carry a dead letter's fields.
DROP = "dropped_"
#: Prefix of the operator's output columns that carry a pane transform's rows.
OUT = "__hw_out_"
PACKET_SCHEMA = "shard INT, n BIGINT, payload BINARY"
#: A source's rejected record (JSON text, null on the records it decoded): such a row
#: skips the model and comes out as a dead letter carrying the text (in the operator
#: output column ``WorkerPlan.rejects``), so a source is read once for records and
#: rejects.
REJECTED = "__hw_rejected"
#: The packet "shard" of a micro-batch partition's rejected rows: its handler emits
#: them as dead letters and touches no state.
REJECT_SHARD = -1


@dataclass(frozen=True)
class Partial:
    """One pre-aggregated column of a lifted packet: ``how`` of input ``source``."""

    column: str  # e.g. "sum_score"
    source: str
    how: Literal["sum", "count", "min", "max"]


@dataclass(frozen=True)
class Lift:
    """Combiner lifting: pre-aggregate per (key, window slice) in the packer."""

    slice_size: int  # 0: one slice (global window)
    slice_offset: int
    partials: tuple[Partial, ...]


@dataclass(frozen=True)
class Output:
    """How an aggregation's output column is read off the reducer's panes.

    ``direct``: the reducer's column ``column``; ``mean`` (lifted): the ratio of
    a sum column and a non-null count column (``count_column``).
    """

    name: str
    how: Literal["direct", "mean"]
    column: str
    count_column: str = ""


@dataclass(frozen=True)
class WorkerPlan:
    """Everything the Python workers need."""

    strategy: WindowingStrategy
    aggregations: dict[str, tuple[CombineFn, str | None]]  # what the Reducer runs
    outputs: tuple[Output, ...]
    input_cols: tuple[str, ...]  # reducer input (value) columns of a packet
    lift: Lift | None
    shard_ids: tuple[int, ...]
    has_kind: bool
    punctuated: bool  # else: Spark's watermark (bounded out-of-orderness)
    has_proc: bool
    out_schema: T.StructType
    max_packet_rows: int
    needs_dummy: bool = False  # an aggregation without input column, and no 'value' input
    #: a front end's pane transform (headwater.model.transform): output rows of kind
    #: 'change' replace the panes
    transform: Any = None
    #: the watermark strategy each shard derives from its own rows (a K-slack of
    #: headwater.model.slack), or None
    derived: Any = None
    has_order: bool = False  # an ORDER column (arrival order within a processing time)
    #: the plan reads an end-of-input control stream (headwater.io.end_of_input): the
    #: KIND column is projected, and an 'end' row ends the input
    ends: bool = False
    #: the rows carry REJECTED (a source's rejected records travel with its records):
    #: the operator output column of their text, else None
    rejects: str | None = None
    #: a state time-to-live (ms; SQL's 'state.ttl'): each shard drops the state of
    #: its keys idle that long, and every micro-batch reaches every shard
    ttl: int | None = None
    #: which rows of a window the reducer keeps (headwater.model.keep; None: all)
    keep: TopRows | None = None

    @property
    def has_control(self) -> bool:
        """Whether packets carry KIND, so control rows reach every shard."""
        return self.has_kind or self.ends


_PROFILERS: dict[str, Any] = {}


def profiled(role: str, fn: Callable, *args):
    """Run ``fn(*args)`` under this process's profiler for ``role`` (if enabled)."""
    directory = os.environ.get(PROFILE_ENV)
    if not directory:
        return fn(*args)
    import cProfile

    prof = _PROFILERS.get(role)
    if prof is None:
        prof = _PROFILERS[role] = cProfile.Profile()
    prof.enable()
    try:
        return fn(*args)
    finally:
        prof.disable()
        os.makedirs(directory, exist_ok=True)
        prof.dump_stats(os.path.join(directory, f"{role}-{os.getpid()}.prof"))
