"""A sink that discards what it is given and counts it: Flink's ``blackhole``.

NEXMark measures its queries into a sink that computes every row and keeps none
(Flink's ``'connector' = 'blackhole'``), so that a benchmark times the query, not
the sink. :class:`BlackholeSink` does the same with the batches a runner hands
it (``sink(batch, batch_id)``):

* a Spark DataFrame is written with Spark's ``noop`` format, which runs the whole
  plan and materializes every row of every column (nothing is pruned: the write
  takes all the columns), its rows counted in the same job by
  ``DataFrame.observe``; no row reaches the driver;
* a pandas DataFrame or an Arrow table (the local runner's batches) is counted.

A batch run again under the same id (a restart, a replayed micro-batch) replaces
its earlier count, so :attr:`BlackholeSink.rows` counts each batch once.
"""

from __future__ import annotations

from typing import Any

from headwater.io.sinks.batches import is_spark


class BlackholeSink:
    """Discards every batch; ``rows`` is how many changelog rows it was given."""

    #: The local runner may hand it Arrow slices (nothing is converted to pandas).
    takes_arrow = True
    #: A Spark path may hand it its changes as a Spark DataFrame, uncollected.
    discards = True

    def __init__(self, name: str = "blackhole") -> None:
        self.name = name
        self.batches: dict[int, int] = {}

    def __call__(self, batch: Any, batch_id: int) -> None:
        self.batches[batch_id] = self.write(batch)

    @property
    def rows(self) -> int:
        """The rows of all the batches received (each batch id counted once)."""
        return sum(self.batches.values())

    def write(self, batch: Any) -> int:
        """Discard ``batch``; its row count (a Spark DataFrame: computed by Spark)."""
        if is_spark(batch):
            return noop_count(batch)
        return len(batch) if hasattr(batch, "__len__") else batch.num_rows

    def __repr__(self) -> str:
        return f"BlackholeSink({self.name!r}, rows={self.rows})"


def noop_count(df: Any) -> int:
    """Run ``df`` to its last row and column into Spark's ``noop`` sink; its row
    count, observed in that same job (one job, nothing collected)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation()  # a name of its own: one per job
    observed = df.observe(observation, F.count(F.lit(1)).alias("rows"))
    observed.write.format("noop").mode("overwrite").save()
    return int(observation.get.get("rows", 0))


__all__ = ["BlackholeSink", "noop_count"]
