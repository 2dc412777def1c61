"""Run a test timeline through the Spark streaming runner (``--runner spark``).

The timeline (bundles, watermark advances, clock advances: the steps of the
local runner) is written as a replay file (``headwater.io.replay``) and played
by a streaming query, one step per micro-batch, through
:func:`headwater.runners.spark.streaming.run_streaming` with punctuated
watermarks. The panes and drops of micro-batch ``i`` are step ``i``'s
emission, so a transcript checks the Spark runner exactly as it checks the
local one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from headwater.io.kafka import cached_spark_jars
from headwater.io.replay import read_replay, write_timeline
from headwater.model.reducer import Aggregations, Emission
from headwater.model.schema import PANE_COLUMNS, WINDOW_COLUMNS
from headwater.model.steps import Bundle, ClockAdvance, MicroBatch, Step, WatermarkAdvance
from headwater.model.strategy import WindowingStrategy
from headwater.runners.spark.session import LOCAL_CHECKPOINT_CONF, ROCKSDB_PROVIDER

#: Configuration of the session ``run_timeline`` creates when none is active.
LOCAL_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "headwater-timeline",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # local mode runs every task in the driver: Spark's 1 GB ran out in the state server
    # of transformWithStateInPandas (NEXMark q23, 200,000 events; docs/nexmark.md)
    "spark.driver.memory": "4g",
    # and a JVM out of heap exits: the state server's thread died, and the query then
    # waited on its socket for ever (Spark itself exits on a task thread's OOM)
    "spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError",
    **LOCAL_CHECKPOINT_CONF,
}


def spark_session():
    """The active SparkSession, or a local one for timelines."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in LOCAL_CONF.items():
        builder = builder.config(key, value)
    # Spark's Kafka connector, when scripts/kafka.sh has resolved it (local files).
    jars = cached_spark_jars()
    if jars:
        builder = builder.config("spark.jars", jars)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _sql_type(values: Sequence[Any]) -> str:
    kind = pd.Series(list(values), dtype=object).infer_objects().dtype
    if pd.api.types.is_bool_dtype(kind):
        return "boolean"
    if pd.api.types.is_integer_dtype(kind):
        return "bigint"
    if pd.api.types.is_float_dtype(kind):
        return "double"
    return "string"


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def timeline_steps(steps: Sequence[Step]) -> tuple[list[dict], dict[str, str], str]:
    """Replay steps, value column types and key type of a local-runner timeline."""
    now = 0
    out: list[dict] = []
    all_keys: list[Any] = []
    columns: dict[str, list[Any]] = {}
    bundles: list[tuple[list, list, dict[str, list]]] = []

    def bundle_index(step: Bundle) -> int:
        if isinstance(step.values, pd.DataFrame):
            vals = {c: list(step.values[c]) for c in step.values.columns}
        elif step.values is None:
            vals = {}
        else:
            vals = {"value": list(step.values)}
        for c, v in vals.items():
            columns.setdefault(c, []).extend(v)
        all_keys.extend(step.keys)
        bundles.append((list(step.keys), list(step.timestamps), vals))
        return len(bundles) - 1

    for step in steps:
        if isinstance(step, MicroBatch):
            now = max(now, int(step.now)) if step.now is not None else now
            replay: dict[str, Any] = {"proc_ms": now, "timers": step.fire_timers}
            if step.watermark is not None:
                replay["watermark_ms"] = int(step.watermark)
            if step.rows is not None:
                replay["rows"] = bundle_index(step.rows)
            if step.arrival_watermark is not None:
                raise ValueError("a replay carries its watermark after the rows (punctuated)")
            out.append(replay)
        elif isinstance(step, Bundle):
            out.append({"proc_ms": now, "rows": bundle_index(step)})
        elif isinstance(step, WatermarkAdvance):
            out.append({"proc_ms": now, "watermark_ms": int(step.watermark)})
        elif isinstance(step, ClockAdvance):
            now = max(now, int(step.now))
            out.append({"proc_ms": now})
        else:
            raise TypeError(f"unknown step {step!r}")
    names = list(columns)
    key_type = _sql_type(all_keys) if all_keys else "string"
    for s in out:
        if "rows" in s:
            keys, ts, vals = bundles[s["rows"]]
            if key_type == "string":
                keys = [None if k is None else str(k) for k in keys]
            s["rows"] = [
                [_plain(k), int(t), *[_plain(vals[c][i]) if c in vals else None for c in names]]
                for i, (k, t) in enumerate(zip(keys, ts, strict=True))
            ]
    types = {c: _sql_type(columns[c]) for c in names}
    return out, types, key_type


def run_timeline(
    strategy: WindowingStrategy,
    aggregations: Aggregations | None,
    steps: list[Step],
    *,
    spark=None,
    num_shards: int | None = None,
    lift: bool | str = False,
    shuffle_partitions: int | None = 2,
) -> list[Emission]:
    """The emission of every step, computed by a Spark streaming query.

    ``shuffle_partitions``: set on the session while the query runs, it gives
    the shard count unless ``num_shards`` is given (the query runs with one
    shuffle partition per shard): timelines are tiny, and every partition of a stateful
    operator costs a state-store commit per micro-batch (2 partitions run a
    10-step timeline in ~9 s, 4 in ~13 s). ``None`` keeps the session's value.

    Combiner lifting is off by default, so dropped elements come back one by
    one, exactly as the local runner reports them (with ``lift``, a dropped row
    is a partial aggregate with an ``elements`` count).
    """
    from headwater.runners.spark.session import starting_query
    from headwater.runners.spark.streaming import run_streaming

    spark = spark or spark_session()
    replay_steps, types, key_type = timeline_steps(steps)
    needed = {col for _, col in (aggregations or {}).values() if col is not None}
    if aggregations is None:
        needed.add("value")
    for col in needed:
        types.setdefault(col, "bigint")  # a timeline without elements still needs the column
    work = tempfile.mkdtemp(prefix="headwater-timeline-")
    conf_key = "spark.sql.shuffle.partitions"
    saved = spark.conf.get(conf_key)
    if shuffle_partitions is not None:
        spark.conf.set(conf_key, str(shuffle_partitions))
    try:
        path = os.path.join(work, "timeline.jsonl")
        write_timeline(path, replay_steps, columns=types, key_type=key_type)
        df = read_replay(spark, path)
        out = run_streaming(
            df,
            key_cols="key",
            event_time_col="ts",
            strategy=strategy,
            aggregations=aggregations,
            value_col="value" if aggregations is None else None,
            watermark="punctuated",
            num_shards=num_shards,
            timestamps="ms",
            lift=lift,
        )
        batches: dict[int, pd.DataFrame] = {}

        def collect(batch, batch_id: int) -> None:
            batches[batch_id] = batch.toPandas()

        writer = (
            out.writeStream.foreachBatch(collect)
            .option("checkpointLocation", os.path.join(work, "checkpoint"))
            .trigger(availableNow=True)
        )
        with starting_query(spark, num_shards):
            query = writer.start()
        try:
            query.awaitTermination()
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
    finally:
        spark.conf.set(conf_key, saved)
        shutil.rmtree(work, ignore_errors=True)
    names = list(aggregations) if aggregations is not None else ["values"]
    return [_emission(batches.get(i), names) for i in range(len(steps))]


def _emission(batch: pd.DataFrame | None, names: list[str]) -> Emission:
    pane_cols = ["key", *WINDOW_COLUMNS, *names, *PANE_COLUMNS]
    drop_cols = ["key", "timestamp", "window_start", "window_end", "reason"]
    if batch is None or not len(batch):
        return Emission(pd.DataFrame(columns=pane_cols), pd.DataFrame(columns=drop_cols))
    panes = batch[batch["kind"] == "pane"][pane_cols].reset_index(drop=True)
    for name in names:
        # Arrays come back as numpy arrays; the core's panes carry lists.
        if len(panes) and isinstance(panes[name].iloc[0], np.ndarray):
            panes[name] = [list(v) for v in panes[name]]
    dropped = batch[batch["kind"] == "dropped"].reset_index(drop=True)
    drops = dropped[["key", "timestamp", "window_start", "window_end"]]
    if len(dropped):
        extra = pd.DataFrame([_as_dict(r) for r in dropped["dropped"]])
        drops = pd.concat([drops, extra], axis=1)
    else:
        drops = pd.DataFrame(columns=drop_cols)
    return Emission(panes, drops)


def _as_dict(row: Any) -> dict:
    return row.asDict() if hasattr(row, "asDict") else dict(row)
