"""Parquet sinks: each micro-batch to its own directory ``<path>/batch_id=N``.

Idempotent per batch id: a micro-batch that runs again after a failure (same
``batch_id``, same rows) overwrites its own directory, and one that turns out
empty removes what an earlier attempt wrote.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from headwater.io.sinks.batches import Sink, column_names, is_spark, panes_only, to_arrow


class _ParquetBatches:
    """Each non-empty micro-batch to ``<path>/batch_id=N`` (overwritten when re-run)."""

    def __init__(self, path: str | os.PathLike, *, files_per_batch: int | None = None) -> None:
        self.path = os.fspath(path).rstrip("/")
        if files_per_batch is not None and files_per_batch < 1:
            raise ValueError("files_per_batch must be a positive number (or None)")
        self.files_per_batch = files_per_batch

    def batch_path(self, batch_id: int) -> str:
        return f"{self.path}/batch_id={int(batch_id)}"

    def _select(self, batch: Any) -> Any:
        return batch

    def __call__(self, batch: Any, batch_id: int) -> None:
        target = self.batch_path(batch_id)
        batch = self._select(batch)
        if is_spark(batch):
            if batch.isEmpty():
                # A re-run that yields nothing must not leave an earlier attempt's rows.
                _delete_dir(target, batch.sparkSession)
                return
            out = batch if self.files_per_batch is None else batch.coalesce(self.files_per_batch)
            out.write.mode("overwrite").parquet(target)
            return
        import pyarrow.parquet as pq

        table = to_arrow(batch)
        _delete_dir(target)
        if table.num_rows:
            os.makedirs(target, exist_ok=True)
            pq.write_table(table, os.path.join(target, "part-00000.parquet"))

    def read(self, spark: Any = None) -> Any:
        """Everything written so far, with a ``batch_id`` column: a Spark DataFrame
        when ``spark`` is given, else a pandas DataFrame (empty if nothing yet)."""
        if spark is not None:
            return spark.read.option("basePath", self.path).parquet(self.path)
        import pyarrow.dataset as ds

        if not os.path.isdir(self.path) or not any(
            name.startswith("batch_id=") for name in os.listdir(self.path)
        ):
            import pandas as pd

            return pd.DataFrame()
        table = ds.dataset(self.path, format="parquet", partitioning="hive").to_table()
        frame = table.to_pandas()
        frame["batch_id"] = frame["batch_id"].astype("int64")
        return frame

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


def _delete_dir(path: str, spark: Any = None) -> None:
    """Remove ``path`` recursively if it exists (a Hadoop path when ``spark`` is given)."""
    if spark is not None:
        try:
            jvm = spark.sparkContext._jvm
            hpath = jvm.org.apache.hadoop.fs.Path(path)
            fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
            if fs.exists(hpath):
                fs.delete(hpath, True)
            return
        except Exception:  # noqa: BLE001 - no JVM access (Spark Connect): local paths only
            pass
    local = path[len("file:") :] if path.startswith("file:") else path
    if os.path.isdir(local):
        shutil.rmtree(local)


class ChangelogSink(_ParquetBatches):
    """Append-only Parquet changelog: every pane row of every micro-batch,
    retractions included, under ``<path>/batch_id=N/``.

    Replaying it gives the results at any point: for sums and counts, add the
    values with retractions negated; in general, per window the last row by
    ``(batch_id, pane_index, is_retraction)`` (see :mod:`headwater.io.sinks.results`).
    Idempotent per batch id: a re-run batch overwrites its own directory.
    ``files_per_batch`` coalesces each batch to that many files.
    """

    def _select(self, batch: Any) -> Any:
        return panes_only(batch)


class DeadLetterSink(_ParquetBatches):
    """Parquet files of the elements a streaming query dropped (``dead_letter_sink``):
    key columns, the element's window, ``event_time``, ``reason`` and the input
    columns the aggregations read, under ``<path>/batch_id=N/``.

    It takes dead letters as :meth:`~headwater.api.WindowedAggregation.start`
    passes them to ``dead_letter_sink``, not a runner's raw output."""

    def _select(self, batch: Any) -> Any:
        if "kind" in column_names(batch):
            raise TypeError(
                f"{self!r} takes dead letters, not a runner's raw output (a batch with a "
                f"'kind' column): pass the split dead letters, e.g. "
                f"WindowedAggregation.start(dead_letter_sink=DeadLetterSink(...))"
            )
        return batch


def parquet_sink(path: str | os.PathLike) -> Sink:
    """A sink writing each micro-batch to ``path/batch_id=N`` (overwrite: idempotent);
    panes and dead letters alike (as ``headwater.runners.spark.streaming.parquet_sink``)."""
    return _ParquetBatches(path)
