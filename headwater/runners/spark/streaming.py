"""The Spark streaming runner: the engine-independent core on Structured Streaming.

``run_streaming`` turns a streaming DataFrame into the panes (and dropped
elements) of a windowed aggregation, executed by :class:`~headwater.model.
reducer.Reducer` inside ``transformWithStateInPandas``.

Plan (per micro-batch)::

    source ─ project (native) ─ pack (mapInArrow) ─ shuffle by shard ─ TWS(shard) ─ decode (native)

The modules of this runner follow that plan:

* **project** (here): key, event time in ms, the aggregations' input columns
  and the shard id ``hash(key) mod N`` (``shard.py``), all native Spark
  expressions;
* **pack** (``packing.py``): per input partition, one Arrow IPC packet per
  shard, with combiner lifting where it is valid;
* **TWS** (``processor.py``, ``shard_logic.py``): grouped by shard, one model
  step per shard and micro-batch, state read and written once;
* **decode** (``output.py``): keys, window bounds and timestamps back to Spark
  types; :func:`panes` and :func:`dead_letters` split the output.

What the workers share (the packet columns and the ``WorkerPlan``) is in
``worker.py``.

Watermarks
----------
``watermark="punctuated"``: the watermark comes with the data, in a column
(``watermark_ms``; the replay source writes it on every row of a step). A
micro-batch is one step (docs/semantics.md, rule 7), applied by the model's
``apply_step``: add the bundle, advance the watermark, evaluate the triggers
once, then fire processing-time timers due at the step's time.

``watermark=<delay>`` (bounded out-of-orderness, like ``withWatermark``): the
runner applies Spark's own ``withWatermark(event_time, delay)`` upstream, so
the global watermark is Spark's: the max event time of previous micro-batches
minus the delay, checkpointed with the query. The operator runs in
``timeMode="EventTime"`` and reads it from ``TimerValues.
getCurrentWatermarkInMs()``. Spark filters "late" rows only in stateful
operators whose *input* carries the watermarked column; here the operator's
input is the packer's output (fresh attributes without watermark metadata),
so Spark filters nothing (measured: 0 rows dropped by Spark, behind-watermark
rows reach the handler). headwater alone decides what is late (window end +
allowed lateness <= watermark) and counts and routes every drop. Spark's
"no watermark yet" value 0 is read as "no watermark". Here the watermark is
advanced *before* the bundle is added: Spark computed it before the batch's
rows arrived, so it is the watermark at their arrival (rule 3).

K-slack strategies (``headwater.model.slack``: ``FixedSlack``,
``MaxDelaySlack``, ``QualityDriven``; :data:`WATERMARKS` maps them to
:class:`PerShard`): each shard derives its own watermark ``t_max - K`` from
its own rows, in ``shard_logic``. The shard applies one model step per
processing time of its rows (the processing-time column, e.g. a micro-batch
time of the source; rows of one time in ``arrival_order_col`` order), each
followed by the watermark its tracker (the model's, keyed by strategy class,
kept in a second ``ValueState``) derives from the rows so far, so the results
do not depend on how Spark cuts the stream into micro-batches: they are the
local runner's. A control row of kind ``end`` ends the input (the watermark
goes to the end of time). No event-time timers and no combiner lifting (delays
are measured per row). The output gets ``processing_time`` (the step of each
row) and rows of kind ``watermark``, one per shard and step, with the
shard's watermark and ``K`` (:func:`watermark_trace`).

Processing time: the ``proc_ms`` column when present (replays: the virtual
clock), else Spark's batch timestamp (``TimerValues.
getCurrentProcessingTimeInMs()``, the same for every shard of a batch and
recorded in the offset log, so a re-executed batch sees the same time).

State and recovery: one ``ValueState`` per shard in the state store (use the
RocksDB provider) and a checkpoint location; the shard count ``N`` must not
change between runs of one query (it names state keys).

Output: see ``output.py``. Profiling: with ``HEADWATER_PROFILE_DIR`` set when
the SparkSession starts, every Python worker writes cProfile files of the
packer and the shard steps there (``pack-<pid>.prof``, ``step-<pid>.prof``,
``unpack-<pid>.prof``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from headwater.io.end_of_input import EndOfInput
from headwater.model import combiners as C
from headwater.model import types as HT
from headwater.model.keep import TopRows
from headwater.model.plan import (
    Capabilities,
    NullEventTime,
    PlanError,
    Schema,
    WindowedAggregationPlan,
    build_plan,
    null_event_time_error,
)
from headwater.model.slack import FixedSlack, MaxDelaySlack, QualityDriven
from headwater.model.strategy import WindowingStrategy
from headwater.model.transform import PaneTransform
from headwater.model.watermarks import (
    BoundedOutOfOrderness,
    Punctuated,
    WatermarkStrategy,
    watermark_strategy,
)
from headwater.runners.spark.ending import started
from headwater.runners.spark.output import (
    PANE_FIELDS,
    dead_letters,
    decode,
    observe_counts,
    panes,
    watermark_trace,
)
from headwater.runners.spark.packing import Packer, lifted_aggregations, lifting
from headwater.runners.spark.processor import ShardProcessor
from headwater.runners.spark.session import check_workers, default_shards, starting_query
from headwater.runners.spark.shard import aligned_shard_ids, shard_column
from headwater.runners.spark.types import of_spark, to_spark
from headwater.runners.spark.worker import (
    DROP,
    KEY,
    KIND,
    ORDER,
    OUT,
    PACKET_SCHEMA,
    PROC,
    REJECTED,
    SHARD,
    SHARD_NO,
    SHARD_SLACK,
    SHARD_WM,
    STEP_TIME,
    TS,
    WM,
    N,
    Output,
    WorkerPlan,
)

__all__ = [
    "CAPABILITIES",
    "WATERMARKS",
    "compile_streaming",
    "dead_letters",
    "lifting",
    "observe_counts",
    "panes",
    "run_streaming",
    "start_streaming",
    "watermark_trace",
]

_NO_KEY = "__hw_no_key"  # the one key of an aggregation without key columns

Sink = Callable[[DataFrame, int], None]


def run_streaming(
    df: DataFrame,
    *,
    key_cols: str | Sequence[str],
    event_time_col: str,
    strategy: WindowingStrategy,
    aggregations: Mapping[str, tuple[C.CombineFn, str | None]] | None = None,
    value_col: str | None = None,
    watermark: Any = "punctuated",
    on_null_event_time: str = "dead_letter",
    **options: Any,
) -> DataFrame:
    """Windowed aggregation of a streaming DataFrame, executed by the core.

    Builds the plan (:func:`headwater.model.plan.build_plan`, which validates
    everything) and compiles it with :func:`compile_streaming` (``options``).
    ``key_cols``: the user key (one or more columns). ``event_time_col``: a
    timestamp column or int64 epoch milliseconds. ``aggregations``: output
    name -> ``(CombineFn, input column)``; ``None`` groups without combining:
    panes carry ``values`` (a list of ``value_col``). ``watermark``: a
    strategy, ``"punctuated"`` (from a ``watermark_ms`` column, e.g. the
    replay source) or a delay (``"10 seconds"``) for Spark's
    bounded-out-of-orderness watermark.
    """
    keys = (key_cols,) if isinstance(key_cols, str) else tuple(key_cols)
    if aggregations is None:
        if value_col is None:
            raise PlanError("give aggregations, or value_col to collect values")
        aggregations = {"values": (C.ToList(), value_col)}
    plan = build_plan(
        Schema.of({f.name: of_spark(f.dataType) for f in df.schema.fields}),
        keys=keys,
        event_time=event_time_col,
        windowing=strategy,
        aggregations=aggregations,
        bounded=False,
        watermark=watermark_strategy(watermark),
        on_null_event_time=on_null_event_time,
        capabilities=CAPABILITIES,
    )
    return compile_streaming(df, plan, **options)


def _punctuated(df: DataFrame, strategy: Punctuated, event_time: str):
    """The watermark comes in a column (epoch ms): project it into every packet."""
    column = F.col(strategy.column)
    if isinstance(df.schema[strategy.column].dataType, T.TimestampType):
        column = F.unix_millis(column)
    return df, column.cast("long")


def _bounded(df: DataFrame, strategy: BoundedOutOfOrderness, event_time: str):
    """Spark's own ``withWatermark``: global, checkpointed, read from TimerValues."""
    et_type = df.schema[event_time].dataType
    source = event_time
    if isinstance(et_type, T.IntegralType):
        source = "__hw_event_time"
        df = df.withColumn(source, F.timestamp_millis(F.col(event_time)))
    elif isinstance(et_type, T.TimestampNTZType):
        raise PlanError(
            f"a bounded out-of-orderness watermark on Spark needs a TIMESTAMP column; "
            f"{event_time!r} is TIMESTAMP_NTZ",
            argument=event_time,
            fix=f"Cast it: F.col({event_time!r}).cast('timestamp')",
        )
    return df.withWatermark(source, f"{strategy.delay} milliseconds"), None


@dataclass(frozen=True)
class PerShard:
    """The watermark each shard derives from its own rows and state (see
    ``shard_logic``): ``strategy`` names the tracker (``headwater.model.slack``)."""

    strategy: WatermarkStrategy


def _per_shard(df: DataFrame, strategy: WatermarkStrategy, event_time: str):
    """A K-slack buffer: each shard's watermark is its own ``t_max - K``, derived from
    its rows in arrival order, one step per processing time (module docstring)."""
    return df, PerShard(strategy)


#: How this runner executes each watermark strategy: ``f(df, strategy, event_time)
#: -> (df, source)``; the source is a watermark column (punctuated), ``None``
#: (Spark's own watermark) or :class:`PerShard` (each shard derives its own).
WATERMARKS: dict[type[WatermarkStrategy], Callable] = {
    Punctuated: _punctuated,
    BoundedOutOfOrderness: _bounded,
    FixedSlack: _per_shard,
    MaxDelaySlack: _per_shard,
    QualityDriven: _per_shard,
}

#: What the streaming runner executes: any window function and combiner (the core
#: runs inside Spark), the watermark strategies of :data:`WATERMARKS`, and output
#: types Spark can hold.
CAPABILITIES = Capabilities(
    "Spark streaming", watermarks=tuple(WATERMARKS), output_types_known=True
)


def compile_streaming(
    df: DataFrame,
    plan: WindowedAggregationPlan,
    *,
    num_shards: int | None = None,
    processing_time_col: str | None = "auto",
    kind_col: str | None = "auto",
    output_types: Mapping[str, T.DataType | str] | None = None,
    timestamps: str | None = None,
    max_packet_rows: int = 1_000_000,
    lift: bool | str = "auto",
    transform: PaneTransform | None = None,
    arrival_order_col: str | None = None,
    carry: Sequence[str] = (),
    end_of_input: EndOfInput | None = None,
    rejected_col: str | None = None,
    state_ttl: int | None = None,
    keep: TopRows | None = None,
) -> DataFrame:
    """The Spark streaming plan of a validated ``plan`` over the streaming ``df``.

    ``num_shards``: state shards (default :func:`~headwater.runners.spark.session.
    default_shards`: the shuffle partitions, at most the session's cores; keep it
    fixed for the life of a checkpoint, and start the query with as many shuffle
    partitions: :func:`start_streaming` does). Raises :class:`~headwater.runners.
    spark.session.WorkerPythonError` if the session's Python workers cannot import
    headwater. ``processing_time_col``:
    ``"auto"`` uses ``proc_ms`` if the input has it, else Spark's batch
    timestamp; ``None`` forces the batch timestamp. ``kind_col``: rows whose
    kind is ``'tick'`` or ``'clock'`` are control rows (a replay); then only a
    ``'clock'`` row makes its micro-batch fire the processing-time timers due
    by its time (``"auto"``: ``kind`` if present); without one every
    micro-batch fires them. ``output_types``: Spark types overriding the
    plan's. ``timestamps``: ``"timestamp"`` (Spark timestamps; values outside
    Spark's range, e.g. the global window's bounds, become null) or ``"ms"``
    (int64 epoch milliseconds); default: the event-time column's kind.
    ``lift``: combiner lifting (``"auto"``: when valid, see :func:`lifting`):
    each packet pre-aggregates its rows per key and window slice before the
    shuffle, so the reducer sees partial aggregates; panes are the same, but a
    dead letter is then one partial aggregate of ``elements`` dropped elements
    instead of one element. ``transform``: a front end's pane transform
    (:mod:`headwater.model.transform`), run in each shard after every step; its
    rows (kind ``'change'``, its columns) replace the panes.
    ``arrival_order_col``: with a watermark each shard derives (K-slack), the
    order in which rows of one processing time arrived (delays are measured in
    arrival order); without it, the order Spark hands the rows over.
    ``carry``: more columns of ``df`` that each dead letter keeps (a front end's
    whole row, so that a dropped row can be reprocessed); they travel with
    every row to its shard, so a plan that carries any is not lifted
    (``lift=True`` refuses: a partial aggregate has no row).
    ``end_of_input``: the plan also reads this control stream, whose ``end`` row
    moves every shard's watermark to the end of time (:mod:`.ending`; start it
    with :func:`start_streaming` and the same object).
    ``rejected_col``: a string column of ``df``, non-null on the records a source
    could not decode (their text): those rows skip the model and come out as
    dropped rows whose ``dropped`` struct carries the text in a field of that
    name, so one scan of the source feeds both (:func:`headwater.io.kafka.read_spark`).
    ``state_ttl``: a state time-to-live (ms; SQL's ``'state.ttl'``, needs a
    ``transform`` with ``forget``): each shard keeps its keys' idle times
    (:class:`~headwater.model.idle.IdleKeys`) and, at every micro-batch (each
    reaches every shard), drops the state of the keys idle that long before the
    batch's rows, the transform withdrawing their results.
    ``keep``: which rows of a window each shard's reducer keeps (``model.keep``;
    None: all of them).

    Returns a streaming DataFrame (see the module docstring for its columns).
    """
    spark = df.sparkSession
    check_workers(spark)
    if timestamps is None:
        timestamps = "timestamp" if plan.event_time_type == HT.TIMESTAMP else "ms"
    keys = list(plan.keys)
    if not keys:  # state is sharded by key: give all elements one key
        df = df.withColumn(_NO_KEY, F.lit(0))
        keys = [_NO_KEY]
    aggs = plan.core_aggregations
    input_cols = list(plan.input_columns)
    names = set(df.columns)
    proc_col: str | None
    if processing_time_col == "auto":
        proc_col = "proc_ms" if "proc_ms" in names else None
    else:
        proc_col = processing_time_col
    kind: str | None = ("kind" if "kind" in names else None) if kind_col == "auto" else kind_col
    n_shards = int(num_shards or default_shards(spark))
    df, source = WATERMARKS[type(plan.watermark)](df, plan.watermark, plan.event_time)
    wm_col = source if isinstance(source, Column) else None
    derived = source.strategy if isinstance(source, PerShard) else None
    _check_ttl(state_ttl, transform, derived)
    schema = df.schema

    et_ms = F.unix_millis(F.col(plan.event_time).cast("timestamp"))
    if plan.event_time_type == HT.INT64:
        et_ms = F.col(plan.event_time).cast("long")
    if plan.on_null_event_time == NullEventTime.ERROR:
        message = str(null_event_time_error(plan.event_time))
        et_ms = F.when(et_ms.isNull(), F.raise_error(F.lit(message))).otherwise(et_ms)

    key_fields = [schema[k] for k in keys]
    raw_key, key_expr, key_type = _user_key(keys, key_fields)

    projected = [
        shard_column(keys, n_shards).alias(SHARD),
        key_expr.alias(KEY),
        et_ms.alias(TS),
    ]
    carried = [c for c in carry if c not in input_cols]
    projected += [F.col(c) for c in (*input_cols, *carried)]
    if kind is not None:
        projected.append(F.col(kind).cast("string").alias(KIND))
    elif end_of_input is not None:
        projected.append(F.lit(None).cast("string").alias(KIND))
    if wm_col is not None:
        projected.append(wm_col.alias(WM))
    if proc_col is not None:
        projected.append(F.col(proc_col).cast("long").alias(PROC))
    if derived is not None and arrival_order_col is not None:
        projected.append(F.col(arrival_order_col).cast("long").alias(ORDER))
    if rejected_col is not None:
        projected.append(F.col(rejected_col).cast("string").alias(REJECTED))
    flat = df.select(*projected)
    if end_of_input is not None:
        flat = _with_end_of_input(flat, end_of_input)

    # -- combiner lifting (never with a shard-derived watermark: it measures each row)
    lifted = _lifted(lift, plan, schema, carried, derived)
    outputs: list[Output] = []
    if lifted is None:
        reducer_aggs = aggs
        reducer_inputs = [*input_cols, *carried]
        drop_types = {c: schema[c].dataType for c in reducer_inputs}
        outputs = [Output(name, "direct", name) for name in aggs]
    else:
        reducer_aggs, outputs, drop_types = lifted_aggregations(aggs, lifted, schema)
        reducer_inputs = [p.column for p in lifted.partials] + [N]

    # -- output schema of the operator
    out_fields = [
        T.StructField("kind", T.StringType()),
        T.StructField(KEY, key_type),
        T.StructField("window_start", T.LongType()),
        T.StructField("window_end", T.LongType()),
    ]
    declared = dict(output_types or {})
    for a in plan.aggregations:
        t = declared.get(a.name)
        if t is None:
            out_type = to_spark(a.output_type, what=f"aggregation {a.name!r}")
        else:
            out_type = T._parse_datatype_string(t) if isinstance(t, str) else t
        out_fields.append(T.StructField(a.name, out_type))
    out_fields += PANE_FIELDS
    out_fields.append(T.StructField("reason", T.StringType()))
    out_fields.append(T.StructField(DROP + "elements", T.LongType()))
    out_fields += [T.StructField(DROP + c, t) for c, t in drop_types.items()]
    if rejected_col is not None:
        out_fields.append(T.StructField(DROP + rejected_col, T.StringType()))
    transformed: list[str] = []
    if transform is not None:
        for f in transform.output_fields():
            out_fields.append(T.StructField(OUT + f.name, to_spark(f.type, what=repr(f.name))))
            transformed.append(f.name)
    if derived is not None:
        out_fields += [
            T.StructField(STEP_TIME, T.LongType()),
            T.StructField(SHARD_NO, T.IntegerType()),
            T.StructField(SHARD_WM, T.LongType()),
            T.StructField(SHARD_SLACK, T.LongType()),
        ]
    out_schema = T.StructType(out_fields)

    worker_plan = WorkerPlan(
        strategy=plan.windowing,
        aggregations=reducer_aggs,
        outputs=tuple(outputs),
        input_cols=tuple(reducer_inputs),
        lift=lifted,
        shard_ids=aligned_shard_ids(n_shards),
        has_kind=kind is not None,
        punctuated=wm_col is not None,
        has_proc=proc_col is not None,
        out_schema=out_schema,
        max_packet_rows=int(max_packet_rows),
        needs_dummy=any(col is None for _, col in reducer_aggs.values())
        and "value" not in reducer_inputs,
        transform=transform,
        derived=derived,
        has_order=derived is not None and arrival_order_col is not None,
        ends=end_of_input is not None,
        rejects=None if rejected_col is None else DROP + rejected_col,
        ttl=state_ttl,
        keep=keep,
    )
    packets = flat.mapInArrow(Packer(worker_plan), PACKET_SCHEMA)
    result = packets.groupBy("shard").transformWithStateInPandas(
        statefulProcessor=ShardProcessor(
            cloudpickle.dumps(worker_plan),
            has_transform=transform is not None,
            derives_watermark=derived is not None,
            has_ttl=state_ttl is not None,
        ),
        outputStructType=out_schema,
        outputMode="Append",
        timeMode="EventTime",
    )
    out = decode(
        result,
        keys,
        key_fields,
        raw_key,
        aggs,
        [*drop_types, *([rejected_col] if rejected_col is not None else [])],
        timestamps,
        transformed,
        per_shard=derived is not None,
    )
    return out.drop(_NO_KEY) if not plan.keys else out


def _user_key(keys: list[str], fields: list[T.StructField]) -> tuple[bool, Column, T.DataType]:
    """The user key as the shards see it: raw when it is one plain column (whether
    raw, the column, its type), else the JSON of a struct of the key columns."""
    if len(keys) == 1 and isinstance(
        fields[0].dataType, (T.StringType, T.IntegralType, T.BooleanType)
    ):
        return True, F.col(keys[0]), fields[0].dataType
    return False, F.to_json(F.struct(*[F.col(k) for k in keys])), T.StringType()


def _lifted(
    lift: bool | str,
    plan: WindowedAggregationPlan,
    schema: T.StructType,
    carried: list[str],
    derived: Any,
) -> Any:
    """The combiner lifting of ``plan`` (None: rows go to the shards as they are);
    never with a shard-derived watermark, which measures each row, nor with carried
    rows; ``lift=True`` refuses where lifting is not valid."""
    can_lift = lift in ("auto", True) and derived is None and not carried
    lifted = lifting(plan.windowing, plan.core_aggregations, schema) if can_lift else None
    if lift is True and carried:
        raise PlanError(
            "combiner lifting pre-aggregates rows, so a dead letter could not carry its row "
            f"({', '.join(carried)})",
            argument="lift",
            fix="Pass lift='auto' (rows are carried, not lifted), or carry nothing",
        )
    if lift is True and lifted is None:
        raise PlanError(
            "combiner lifting needs Sum/Count/Min/Max/Mean aggregations of numeric columns, "
            "Global/Fixed/Sliding windows, the end-of-window timestamp combiner, a "
            "trigger without element counts and a watermark that is not per shard",
            argument="lift",
            fix="Pass lift='auto' to lift only where it is valid",
        )
    return lifted


def _check_ttl(state_ttl: int | None, transform: PaneTransform | None, derived: Any) -> None:
    """A state time-to-live needs a transform that withdraws the expired keys'
    results (``forget``), and one step per micro-batch (not a shard-derived
    watermark's step per processing time)."""
    if state_ttl is None:
        return
    if transform is None or not hasattr(transform, "forget"):
        raise PlanError(
            "a state time-to-live needs a pane transform that withdraws the results of "
            "the expired keys (forget)",
            argument="state_ttl",
            fix="Pass the transform of a SQL query (GroupMaintainer), or no state_ttl",
        )
    if derived is not None:
        raise PlanError(
            "a state time-to-live is not supported with a watermark each shard derives (K-slack)",
            argument="state_ttl",
            fix="Use a punctuated or bounded out-of-orderness watermark, or no state_ttl",
        )


def _with_end_of_input(flat: DataFrame, end: EndOfInput) -> DataFrame:
    """The projected rows and the end-of-input stream's ``end`` row (its other
    columns null), one stream."""
    control = end.stream(flat.sparkSession)
    columns = [
        F.col("kind").alias(KIND) if f.name == KIND else F.lit(None).cast(f.dataType).alias(f.name)
        for f in flat.schema.fields
    ]
    return flat.unionByName(control.select(*columns))


def start_streaming(
    out: DataFrame,
    *,
    checkpoint_location: str,
    panes_sink: Sink | None = None,
    dead_letter_sink: Sink | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    metrics_name: str | None = "headwater",
    num_shards: int | None = None,
    end_of_input: EndOfInput | None = None,
):
    """Start the query: panes to ``panes_sink``, dropped elements to
    ``dead_letter_sink`` (each ``f(batch_df, batch_id)``; make them idempotent
    per batch id: a batch re-runs after a failure). ``trigger``: keyword
    arguments of ``DataStreamWriter.trigger``, e.g. ``{"availableNow": True}``.
    ``num_shards``: the one ``out`` was compiled with; the query runs with as
    many shuffle partitions (:func:`~headwater.runners.spark.session.starting_query`).
    ``end_of_input``: the one ``out`` was compiled with (:func:`compile_streaming`);
    when it ends the input, a :class:`~.ending.BoundedQuery` is returned, whose
    ``awaitTermination`` ends the input after the run over it. A checkpoint whose
    input an earlier run ended is refused (:func:`~.ending.refuse_ended`)."""
    if metrics_name:
        out = observe_counts(out, metrics_name)

    if reads_once(panes_sink, dead_letter_sink):

        def each_batch(batch: DataFrame, batch_id: int) -> None:
            if panes_sink is not None:
                panes_sink(panes(batch), batch_id)
            else:
                batch.count()

    else:
        each_batch = _persisting(panes_sink, dead_letter_sink)

    writer = out.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", checkpoint_location
    )
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)

    def launch():
        with starting_query(out.sparkSession, num_shards):
            return writer.start()

    return started(launch, end_of_input, checkpoint_location)


def reads_once(panes_sink: Sink | None, dead_letter_sink: Sink | None) -> bool:
    """Whether one action reads each micro-batch: no dead-letter sink, and a panes
    sink that says it reads its batch once (``reads_batch_once``, e.g.
    :class:`~headwater.io.sinks.delta.DeltaSink`) or none. Then the batch is not
    persisted: keeping it in memory for a single read only costs a copy."""
    if dead_letter_sink is not None:
        return False
    return panes_sink is None or bool(getattr(panes_sink, "reads_batch_once", False))


def _persisting(panes_sink: Sink | None, dead_letter_sink: Sink | None):
    """The batch function of several readers: the batch is persisted, so the
    stateful operator runs once for all of them."""

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            if panes_sink is not None:
                panes_sink(panes(batch), batch_id)
            if dead_letter_sink is not None:
                dead_letter_sink(dead_letters(batch), batch_id)
        finally:
            batch.unpersist()

    return each_batch
