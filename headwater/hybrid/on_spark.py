"""The experiment's runs on Spark (``headwater experiment hpm --runner spark``).

* **Stream module**: MP-K-slack and the quality-driven K-slack, each a streaming
  query of the Spark streaming runner over the stream written as a file source
  (:mod:`headwater.hybrid.sparkrun`); ``shards`` state shards.
* **Batch module**: the ingest archives every tuple (Parquet, by event time)
  before the file holding it reaches the stream; HPM's query feeds its
  micro-batches to the batch module as they come (``HpmSink``), and each
  correction recomputes the affected windows with the bounded Spark plan
  (``compile_bounded``) over the archive.
* **Exact results**: the bounded Spark plan over the whole stream.
* **Throughput**: the stream module for each shard count on ``local[*]`` and on
  ``local-cluster[2,1,2048]`` (two executor JVMs of one core each), each master
  in a process of its own (:mod:`headwater.hybrid.throughput`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headwater.hybrid.correction import Archive
from headwater.hybrid.hpm import AppliedCorrection, BatchModule, StreamRun
from headwater.hybrid.online import OnlineCorrections
from headwater.hybrid.pipeline import Query
from headwater.hybrid.sparkrun import (
    HpmSink,
    Source,
    SparkRecompute,
    StreamOutput,
    exact_panes,
    read_stream_run,
    source_tuples,
    spark_session,
    start,
    stream_query,
    write_source,
)
from headwater.hybrid.throughput import ThroughputJob, run_job
from headwater.model.slack import MaxDelaySlack, SlackStrategy


@dataclass(frozen=True)
class SparkRuns:
    """What the experiment measures, from Spark."""

    truth: pd.DataFrame
    mp: StreamRun
    aq: StreamRun
    corrections: list[AppliedCorrection]


#: Source files per micro-batch (each file holds 5 s of arrival). The results do not
#: depend on it: the runner applies one model step per batch time.
FILES_PER_TRIGGER = 2


def run_stream_query(
    spark,
    source: Source,
    query: Query,
    strategy: SlackStrategy,
    shards: int,
    sink,
    work: Path,
    files_per_trigger: int = FILES_PER_TRIGGER,
) -> None:
    """Run the stream module over ``source`` to its end, each micro-batch to ``sink``."""
    out = stream_query(spark, source, query, strategy, shards, files_per_trigger=files_per_trigger)
    running = start(out, sink, work / "checkpoint", shards)
    running.awaitTermination()
    if running.exception() is not None:
        raise RuntimeError(f"the Spark stream run failed: {running.exception()}")


def write_inputs(stream: pd.DataFrame, query: Query, work: Path, file_ms: int = 5000) -> Source:
    """The stream as a file source under ``work/source`` (``file_ms`` of arrival a file);
    the ingest archives each file's tuples (``work/hpm/archive``) before writing it."""
    archive = Archive(work / "hpm" / "archive", query)
    return write_source(stream, work / "source", query, file_ms=file_ms, on_file=archive.append)


def hpm_run(
    spark,
    source: Source,
    query: Query,
    adaptive: SlackStrategy,
    *,
    gamma: int,
    shards: int,
    work: Path,
    files_per_trigger: int = FILES_PER_TRIGGER,
) -> tuple[StreamRun, list[AppliedCorrection]]:
    """HPM on Spark: the quality-driven stream module over ``source``, its micro-batches
    fed to the batch module (corrections with the bounded Spark plan) as they come.
    Started again over the same ``work``, it resumes from its checkpoint."""
    module = BatchModule(work / "hpm", query, recompute=SparkRecompute(spark))
    sink = HpmSink(StreamOutput(work / "aq", query), OnlineCorrections(module, gamma))
    run_stream_query(spark, source, query, adaptive, shards, sink, work / "aq", files_per_trigger)
    return read_stream_run(work / "aq", query), module.corrections()


def spark_runs(
    stream: pd.DataFrame,
    query: Query,
    adaptive: SlackStrategy,
    *,
    gamma: int,
    shards: int,
    work: Path,
    step=lambda label: None,
    spark=None,
) -> SparkRuns:
    """Exact results, MP-K-slack, and HPM (its stream module is AQ-K-slack's) on Spark."""
    spark = spark or spark_session("local[*]", work / "scratch")
    source = write_inputs(stream, query, work)
    truth = exact_panes(source_tuples(spark, source), query)
    step("exact results")
    mp_out = StreamOutput(work / "mp", query)
    run_stream_query(spark, source, query, MaxDelaySlack(), shards, mp_out, work / "mp")
    step("MP-K-slack")
    aq, corrections = hpm_run(spark, source, query, adaptive, gamma=gamma, shards=shards, work=work)
    step("quality-driven K-slack + HPM")
    runs = SparkRuns(truth, read_stream_run(work / "mp", query), aq, corrections)
    step("HPM corrections")
    return runs


def densify(stream: pd.DataFrame, query: Query, factor: int) -> pd.DataFrame:
    """``factor`` copies of every tuple, each on a key of its own (``key + i * keys``),
    arriving with the original: the same delays and batches, ``factor`` times the
    tuples per batch."""
    if factor <= 1:
        return stream
    keys = stream[query.key].to_numpy()
    dense = stream.loc[stream.index.repeat(factor)].reset_index(drop=True)
    offsets = np.tile(np.arange(factor, dtype=np.int64), len(stream)) * (int(keys.max()) + 1)
    dense[query.key] = dense[query.key].to_numpy() + offsets
    return dense


def spark_throughput(
    stream: pd.DataFrame,
    query: Query,
    strategy: SlackStrategy,
    counts: tuple[int, ...],
    work: Path,
    masters: tuple[str, ...],
    *,
    repeats: int = 2,
    step=lambda label: None,
) -> dict[str, dict]:
    """Tuples per second of the stream module for each shard count, per master (and
    what each master had: executor JVMs, cores)."""
    source = write_source(stream, work / "source", query)
    head = stream.iloc[: len(stream) // 10 + 1]  # a tenth of the stream warms up
    warm_up = write_source(head, work / "warm-up", query)
    out = {}
    for master in masters:
        name = master.replace("[", "-").replace("]", "").replace(",", "-").replace("*", "all")
        job = ThroughputJob(
            master, source, warm_up, query, strategy, counts, str(work / name), repeats=repeats
        )
        out[master] = run_job(job)
        step(f"throughput on {master}")
    return out
