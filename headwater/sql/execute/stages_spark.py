"""Stage 2 of a query in stages (:mod:`headwater.sql.plan.stages`) on a live Spark
stream: on the driver, in the streaming query's ``foreachBatch``.

Spark cannot feed a Python stateful operator's changelog, retractions included,
to a second stateful operator of the same streaming query (it chains stateful
operators in append mode only), so the streaming query is stage 1 (sharded by
its key in ``transformWithStateInPandas`` as any keyed query) and each
micro-batch's stage-1 changelog, collected to the driver, is one
:meth:`~headwater.sql.maintain.stages.SecondStage.step` per processing time
(one DuckDB query each). The sink receives stage 2's changelog; the dead letters
are stage 1's, which reads every stream.

Stage 2's state (stage 1's table view, the materialized rows and their
versions) is kept in the checkpoint directory under the batch id
(``headwater-stages/<batch id>/<part>.parquet``), written before Spark commits
the batch. A batch restores the state the batch before it left (from the driver
when it ran last, else from the checkpoint), so a restart, or a batch Spark runs
again after a failure, starts from the same state and emits the same changelog.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from headwater.runners.spark.output import changes
from headwater.sql.execute.spark_collect import as_pandas, run_persisted
from headwater.sql.maintain.changelog import CHANGE_COLUMNS
from headwater.sql.maintain.stages import SecondStage

#: The checkpoint's folder of stage 2's state, one folder per batch id.
FOLDER = "headwater-stages"
#: The layout of the state files (Parquet metadata): a checkpoint of another is refused.
FORMAT = b"1"
_FORMAT_KEY = b"headwater-stages"
#: Batches of state kept (the last ones: a failed batch runs again).
_KEEP = 3

State = dict[str, pd.DataFrame]


class StageCheckpoint:
    """Stage 2's state in the query's checkpoint directory (any file system
    pyarrow reaches), one folder per batch id."""

    def __init__(self, location: str) -> None:
        if "://" not in location:
            location = os.path.abspath(location.removeprefix("file:"))
        self.fs, self.root = pafs.FileSystem.from_uri(location)

    def _folder(self, batch_id: int) -> str:
        return f"{self.root}/{FOLDER}/{batch_id}"

    def read(self, batch_id: int) -> State:
        """The state ``batch_id`` left."""
        folder = self._folder(batch_id)
        found = self.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        parts: State = {}
        for info in found:
            table = pq.read_table(info.path, filesystem=self.fs)
            if (table.schema.metadata or {}).get(_FORMAT_KEY) != FORMAT:
                raise RuntimeError(f"{info.path}: stage 2's state of another layout")
            parts[info.base_name.removesuffix(".parquet")] = table.to_pandas()
        if "view" not in parts:
            raise RuntimeError(
                f"the checkpoint {self.root} has no stage-2 state of batch {batch_id} (it was "
                "not written by a query run in stages): start a new checkpoint"
            )
        return parts

    def keep(self, batch_id: int, state: State) -> None:
        """Write the state ``batch_id`` leaves, and drop that of old batches."""
        folder = self._folder(batch_id)
        self.fs.create_dir(folder, recursive=True)
        for name, frame in state.items():
            table = pa.Table.from_pandas(frame, preserve_index=False)
            table = table.replace_schema_metadata({_FORMAT_KEY: FORMAT})
            pq.write_table(table, f"{folder}/{name}.parquet", filesystem=self.fs)
        old = self._folder(batch_id - _KEEP)
        if batch_id >= _KEEP and self.fs.get_file_info(old).type != pafs.FileType.NotFound:
            self.fs.delete_dir(old)


@dataclass(frozen=True)
class FirstStage:
    """How a micro-batch of stage 1's streaming output reads, on either path that
    runs stage 1 (the general path or the aggregate fast path, whose outputs lay
    their dead letters out apart): ``fields``, the changelog's columns of the pane
    transform (stage 1's columns, ``undo``, ``ptime`` in ms, ``ver``), and
    ``letters``, the batch's dead letters as the SQL front end shows them."""

    fields: list[str]
    letters: Callable[[Any], Any]


@dataclass
class StagedBatches:
    """The ``foreachBatch`` of a query in stages: stage 2 over each micro-batch's
    stage-1 changelog; its changelog to ``sink``, stage 1's dead letters to
    ``dead_letter_sink``; ``start``: the changelog of the query's start, sent
    with batch 0."""

    first: FirstStage
    stage: SecondStage
    checkpoint: StageCheckpoint
    start: pd.DataFrame
    sink: Callable[[Any, int], None] | None
    dead_letter_sink: Callable[[Any, int], None] | None

    def __post_init__(self) -> None:
        self.schema = self.stage.result_schema()
        self.fresh = _copied(self.stage.snapshot())  # the state before batch 0
        self.at: int | None = None  # the batch whose state self.stage holds

    def __call__(self, batch, batch_id: int) -> None:
        run_persisted(self._run, batch, batch_id)

    def _run(self, batch, batch_id: int) -> None:
        self._restore(batch_id)
        self.at = None  # until the batch is kept: a failure leaves the state mid-batch
        first = as_pandas(changes(batch, self.first.fields))
        parts = [self.start] if batch_id == 0 and len(self.start) else []
        for now, part in first.groupby("ptime", sort=True):
            parts.append(self.stage.step(part.reset_index(drop=True), int(now)))
        spark = batch.sparkSession
        if self.sink is not None:
            self.sink(self._frame(spark, parts), batch_id)
        if self.dead_letter_sink is not None:
            self.dead_letter_sink(self.first.letters(batch), batch_id)
        self.checkpoint.keep(batch_id, self.stage.snapshot())
        self.at = batch_id

    def _restore(self, batch_id: int) -> None:
        """Stage 2's state as the batch before ``batch_id`` left it."""
        if self.at is not None and self.at == batch_id - 1:
            return
        state = self.fresh if batch_id == 0 else self.checkpoint.read(batch_id - 1)
        self.stage.restore(_copied(state))

    def _frame(self, spark, parts: list[pd.DataFrame]):
        """Stage 2's changelog of the batch as a Spark frame (``ptime`` a timestamp)."""
        from pyspark.sql import functions as F

        names = [*self.stage.columns, *CHANGE_COLUMNS]
        full = [p[names] for p in parts if len(p)]
        frame = pd.concat(full, ignore_index=True) if full else pd.DataFrame(columns=names)
        changes_schema = pa.schema(
            [pa.field("undo", pa.bool_()), pa.field("ptime", pa.int64()), ("ver", pa.int64())]
        )
        schema = pa.unify_schemas([self.schema, changes_schema])
        frame = frame.astype(object).where(frame.notna(), None)
        table = pa.Table.from_pandas(frame, schema, preserve_index=False)
        out = spark.createDataFrame(table)
        return out.withColumn("ptime", F.timestamp_millis(F.col("ptime")))


def _copied(state: State) -> State:
    return {name: frame.copy() for name, frame in state.items()}
