"""HPM end to end: the stream module's output fed to the batch module in processing time.

:func:`run_stream` runs a K-slack strategy over every shard (local runner);
:class:`BatchModule` is the batch module (archive, changelog, current-results
table, corrector), fed one chunk at a time. :func:`apply_corrections` replays a
stream run's output in processing-time order, in chunks that end where a
correction is due (the Gamma rule): each chunk's raw tuples are archived, its
stream panes written to the changelog and the current-results table, and its
dead letters corrected. Everything it writes is idempotent per chunk, so after
a crash it is simply run again over the same output: applied chunks are
skipped, an interrupted correction is redone from its manifest. On Spark the
same module is fed online, micro-batch by micro-batch
(:mod:`headwater.hybrid.online`).
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
    Recompute,
    applied_corrections,
    recompute_locally,
    stream_batch_id,
)
from headwater.hybrid.pipeline import BATCH_TIME, Query, ShardRun, run_shard, shard_of
from headwater.io.sinks import ChangelogSink, CurrentResultsSink
from headwater.model.correction import correction_points
from headwater.model.schema import PANE_COLUMNS
from headwater.model.slack import SlackStrategy


@dataclass
class StreamRun:
    """Every shard's run of one strategy, combined."""

    panes: pd.DataFrame  # with the processing ``time`` of each pane
    dead_letters: pd.DataFrame  # with the processing ``time`` each tuple arrived
    shards: list[ShardRun]


def run_stream(stream: pd.DataFrame, query: Query, strategy: SlackStrategy, shards: int):
    """The stream module over ``shards`` shards (each its own watermark), in this process;
    the input ends at the stream's last batch time."""
    end = int(stream[BATCH_TIME].max())
    parts = [shard_of(stream, query, i, shards) for i in range(shards)]
    runs = [run_shard(part, query, strategy, end) for part in parts if len(part)]
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


class BatchModule:
    """HPM's batch module under ``directory``: the archive, the changelog, the
    current-results table and the corrector (``recompute``: the bounded plan's runner).

    It is fed in processing-time order, one chunk at a time (:meth:`apply`)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        query: Query,
        *,
        results: CurrentResultsSink | None = None,
        recompute: Recompute = recompute_locally,
    ) -> None:
        directory = Path(directory)
        self.dir, self.query = directory, query
        self.results = results or results_sink(directory, query)
        self.changelog = ChangelogSink(directory / "changelog")
        self.archive = Archive(directory / "archive", query)
        self.corrector = Corrector(
            directory / "corrections", query, self.archive, self.results, self.changelog, recompute
        )

    def apply(
        self, number: int, panes: pd.DataFrame, late: pd.DataFrame, until: int | None
    ) -> AppliedCorrection | None:
        """Chunk ``number``: its stream panes to the changelog and the table (batch id
        ``2 number``), then, with ``until`` (the processing time the chunk ends at), the
        correction of its registered late tuples ``late``; the correction if applied now."""
        panes = panes.drop(columns="time", errors="ignore")
        self.changelog(panes, stream_batch_id(number))
        if len(panes):
            self.results.write(panes, stream_batch_id(number))
        if until is None or not len(late):
            return None
        done = self.corrector.correct(number, late, until)
        return None if done is None else AppliedCorrection(number, until, done.rows, late)

    def corrections(self) -> list[AppliedCorrection]:
        """Every correction applied so far (read back from the corrector's manifests)."""
        found = applied_corrections(self.dir / "corrections")
        return [AppliedCorrection(*c) for c in found]


def apply_corrections(
    stream: pd.DataFrame,
    run: StreamRun,
    query: Query,
    directory: str | os.PathLike,
    *,
    gamma: int,
    results: CurrentResultsSink | None = None,
) -> list[AppliedCorrection]:
    """Feed ``run`` to the batch module under ``directory``, archiving each chunk's
    tuples first; the corrections applied now (none that an earlier, interrupted call
    applied already)."""
    module = BatchModule(directory, query, results=results)
    dead = run.dead_letters.sort_values("time", kind="stable")
    points = correction_points(dead["time"].to_numpy(), dead["event_time"].to_numpy(), gamma)
    ends = [*points, int(stream[BATCH_TIME].max())]
    pane_cols = [query.key, "window_start", "window_end", query.output, *PANE_COLUMNS, "time"]
    panes = run.panes[pane_cols]
    applied, lo = [], np.iinfo(np.int64).min
    for chunk, hi in enumerate(ends):
        if chunk >= module.corrector.next_correction:
            module.archive.append(stream[in_chunk(stream[BATCH_TIME], lo, hi)], chunk)
            emitted = panes[in_chunk(panes["time"], lo, hi)]
            done = module.apply(chunk, emitted, dead[in_chunk(dead["time"], lo, hi)], hi)
            if done is not None:
                applied.append(done)
        lo = hi
    return applied


def in_chunk(times: pd.Series, lo: int, hi: int) -> pd.Series:
    """Which of ``times`` fall in the chunk ``(lo, hi]``."""
    return (times > lo) & (times <= hi)
