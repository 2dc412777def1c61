"""The stream module of the hybrid model: an ordinary headwater plan with a K-slack
watermark, run per shard on the local runner.

A query is a keyed, windowed aggregation (:class:`Query`); its stream plan
holds the K-slack strategy, its bounded plan (the same windows and
aggregations) is what the batch module recomputes windows with. Shards split
the keys as the Spark streaming runner does (:func:`shard_ids`: Spark's hash of
the key modulo the number of shards), so both runners have the same shards;
each has its own ``t_max`` and ``K``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import pandas as pd

from headwater.model import combiners as C
from headwater.model import types as T
from headwater.model.plan import Capabilities, Schema, WindowedAggregationPlan, build_plan
from headwater.model.quality import AggregateKind, QualityRequirement, coefficient_of_variation
from headwater.model.slack import QualityDriven, SlackStrategy, SlackTrace, slack_trace
from headwater.model.strategy import WindowingStrategy
from headwater.model.watermarks import WatermarkStrategy
from headwater.model.windows import SlidingWindows
from headwater.runners.local import CAPABILITIES, run_frame
from headwater.runners.spark.shard import murmur3_int

#: The column holding each row's micro-batch (processing) time, ms.
BATCH_TIME = "batch_time"


@dataclass(frozen=True)
class Query:
    """``SUM(value)`` per ``key`` over sliding windows (ms), fed in micro-batches."""

    size: int = 500
    period: int = 100
    key: str = "sensor"
    event_time: str = "ts"
    value: str = "speed"
    batch_interval: int = 100
    output: str = "total"

    def windowing(self) -> WindowingStrategy:
        ms = timedelta(milliseconds=1)
        return WindowingStrategy.of(SlidingWindows(self.size * ms, self.period * ms))

    def plan(self, stream: pd.DataFrame, watermark: WatermarkStrategy | None):
        """The local runner's stream plan (``watermark`` given) or bounded one (``None``)."""
        columns = [self.key, self.event_time, self.value, BATCH_TIME]
        schema = Schema.of({c: T.of_pandas(stream[c]) for c in columns if c in stream})
        return self.build(schema, watermark, CAPABILITIES)

    def build(
        self, schema: Schema, watermark: WatermarkStrategy | None, capabilities: Capabilities
    ) -> WindowedAggregationPlan:
        """The plan over ``schema`` for the runner of ``capabilities``."""
        return build_plan(
            schema,
            keys=(self.key,),
            event_time=self.event_time,
            windowing=self.windowing(),
            aggregations={self.output: (C.Sum(), self.value)},
            bounded=watermark is None,
            watermark=watermark,
            capabilities=capabilities,
        )


def with_batches(stream: pd.DataFrame, query: Query) -> pd.DataFrame:
    """The stream with its micro-batch time: arrival rounded up to the batch interval."""
    step = query.batch_interval
    return stream.assign(**{BATCH_TIME: -(-stream["arrival"] // step) * step})


def estimate_requirement(
    stream: pd.DataFrame, query: Query, eps: float, delta: float, *, warm_up: float = 0.05
) -> QualityRequirement:
    """The requirement for SUM, with the tuples per (key, window) and the values'
    variation estimated from the first ``warm_up`` fraction of the stream."""
    head = stream.iloc[: max(int(len(stream) * warm_up), 2)]
    span = max(int(head[query.event_time].max() - head[query.event_time].min()), 1)
    keys = max(head[query.key].nunique(), 1)
    per_window = len(head) / keys * query.size / span
    return QualityRequirement(
        eps,
        delta,
        AggregateKind.SUM,
        window_tuples=max(round(per_window), 1),
        value_cv=coefficient_of_variation(head[query.value].to_numpy()),
    )


def quality_driven(req: QualityRequirement, query: Query, kp: float, kd: float) -> QualityDriven:
    """The quality-driven K-slack of a query: coverage measured on its windows, with a
    follow-up of one window size (after that, a late tuple reaches no window the
    stream module still computes: docs/hybrid.md, "The follow-up period")."""
    return QualityDriven(req, query.size, query.period, kp=kp, kd=kd, follow_up=query.size)


@dataclass
class ShardRun:
    """One shard's stream run: panes and dead letters (with the processing ``time`` of
    the step that made them), each batch's time and the K-slack over the batches."""

    panes: pd.DataFrame
    dead_letters: pd.DataFrame
    batch_times: np.ndarray
    trace: SlackTrace


def shard_ids(keys: np.ndarray, shards: int) -> np.ndarray:
    """The shard of each (integer) key: Spark's ``pmod(hash(key), shards)``, the
    Spark streaming runner's partitioning of a 32-bit integer key column."""
    unique, codes = np.unique(np.asarray(keys, dtype=np.int64), return_inverse=True)
    table = np.array([murmur3_int(int(k)) % shards for k in unique], dtype=np.int64)
    return table[codes]


def shard_of(stream: pd.DataFrame, query: Query, shard: int, shards: int) -> pd.DataFrame:
    return stream[shard_ids(stream[query.key].to_numpy(), shards) == shard]


def run_shard(
    frame: pd.DataFrame, query: Query, strategy: SlackStrategy, end: int | None = None
) -> ShardRun:
    """Run the stream plan over one shard (rows in arrival order, with :data:`BATCH_TIME`:
    step ``i`` of the run is the ``i``-th batch time). The last step ends the input at
    ``end`` (the stream's last batch time; default the shard's)."""
    plan: WindowedAggregationPlan = query.plan(frame, strategy)
    out = run_frame(frame, plan, arrival_time=BATCH_TIME)
    times, starts = np.unique(frame[BATCH_TIME].to_numpy(), return_index=True)
    step_times = np.r_[times, times[-1] if end is None else end]  # the end of the input
    batches = np.split(np.arange(len(frame)), starts[1:])  # rows are in arrival order
    trace = slack_trace(strategy, frame[query.event_time].to_numpy(), batches)
    panes = out.panes.assign(time=step_times[out.panes["step"].to_numpy(np.int64)])
    dead = out.dropped.assign(time=step_times[out.dropped["step"].to_numpy(np.int64)])
    return ShardRun(panes, dead, times, trace)
