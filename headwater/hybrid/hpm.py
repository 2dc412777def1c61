"""HPM end to end: the stream module's output fed to the batch module in processing time.

:func:`run_stream` runs a K-slack strategy over every shard; :func:`apply_corrections`
replays its output in processing-time order, in chunks that end where a
correction is due (the Gamma rule): each chunk's raw tuples are archived, its
stream panes written to the changelog and the current-results table, and its
dead letters corrected. Everything it writes is idempotent per chunk, so after
a crash it is simply run again over the same output: applied chunks are
skipped, an interrupted correction is redone from its manifest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headwater.hybrid.correction import (
    Archive,
    Corrector,
    correction_points,
    stream_batch_id,
)
from headwater.hybrid.pipeline import BATCH_TIME, Query, ShardRun, run_shard, shard_of
from headwater.io.sinks import ChangelogSink, CurrentResultsSink
from headwater.model.schema import PANE_COLUMNS
from headwater.model.slack import SlackStrategy


@dataclass
class StreamRun:
    """Every shard's run of one strategy, combined."""

    panes: pd.DataFrame  # with the processing ``time`` of each pane
    dead_letters: pd.DataFrame  # with the processing ``time`` each tuple arrived
    shards: list[ShardRun]


def run_stream(stream: pd.DataFrame, query: Query, strategy: SlackStrategy, shards: int):
    """The stream module over ``shards`` shards (each its own watermark), in this process."""
    runs = [run_shard(shard_of(stream, query, i, shards), query, strategy) for i in range(shards)]
    return StreamRun(
        pd.concat([r.panes for r in runs], ignore_index=True),
        pd.concat([r.dead_letters for r in runs], ignore_index=True),
        runs,
    )


@dataclass
class AppliedCorrection:
    """A correction and when it was applied (processing time, ms)."""

    number: int
    time: int
    rows: pd.DataFrame  # the new pane rows
    late: pd.DataFrame  # the dead letters it consumed


def results_sink(directory: str | os.PathLike, query: Query, target: str | None = None):
    """The current-results table (DuckDB file in ``directory`` unless ``target`` is given)."""
    where = target or str(Path(directory) / "results.duckdb")
    return CurrentResultsSink(where, table="hpm_results", key_cols=(query.key,))


def apply_corrections(
    stream: pd.DataFrame,
    run: StreamRun,
    query: Query,
    directory: str | os.PathLike,
    *,
    gamma: int,
    results: CurrentResultsSink | None = None,
) -> list[AppliedCorrection]:
    """Feed ``run`` to the batch module under ``directory``; the corrections applied now
    (none that an earlier, interrupted call applied already)."""
    directory = Path(directory)
    results = results or results_sink(directory, query)
    changelog = ChangelogSink(directory / "changelog")
    archive = Archive(directory / "archive", query)
    corrector = Corrector(directory / "corrections", query, archive, results, changelog)
    dead = run.dead_letters.sort_values("time", kind="stable")
    points = correction_points(dead["time"].to_numpy(), dead["event_time"].to_numpy(), gamma)
    ends = [*points, int(stream[BATCH_TIME].max())]
    pane_cols = [query.key, "window_start", "window_end", query.output, *PANE_COLUMNS, "time"]
    panes = run.panes[pane_cols]
    applied, lo = [], np.iinfo(np.int64).min
    for chunk, hi in enumerate(ends):
        if chunk >= corrector.next_correction:
            arrived = stream[(stream[BATCH_TIME] > lo) & (stream[BATCH_TIME] <= hi)]
            archive.append(arrived, chunk)
            emitted = panes[(panes["time"] > lo) & (panes["time"] <= hi)].drop(columns="time")
            changelog(emitted, stream_batch_id(chunk))
            if len(emitted):
                results.write(emitted, stream_batch_id(chunk))
            late = dead[(dead["time"] > lo) & (dead["time"] <= hi)]
            done = corrector.correct(chunk, late) if len(late) else None
            if done is not None:
                applied.append(AppliedCorrection(chunk, hi, done.rows, late))
        lo = hi
    return applied
