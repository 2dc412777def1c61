"""The batches a sink is given, and :func:`fan_out`.

``batch`` may be a Spark DataFrame (the streaming case), a pandas DataFrame
or a pyarrow Table (e.g. the local runner's panes); the helpers here tell them
apart, keep the pane rows and collect a batch as Arrow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: A ``foreachBatch`` function: ``sink(batch, batch_id)``.
Sink = Callable[[Any, int], None]


def is_spark(df: Any) -> bool:
    return type(df).__module__.startswith("pyspark.") and hasattr(df, "sparkSession")


def column_names(df: Any) -> list[str]:
    if isinstance(df, pa.Table):
        return list(df.column_names)
    return list(df.columns)


def panes_only(df: Any) -> Any:
    """The pane rows of a batch (drops the runner's ``kind``/``dropped`` columns)."""
    if "kind" not in column_names(df):
        return df
    if is_spark(df):
        from pyspark.sql import functions as F

        return df.where(F.col("kind") == "pane").drop("kind", "dropped")
    if isinstance(df, pa.Table):
        out = df.filter(pc.equal(df["kind"], "pane"))
        return out.drop_columns([c for c in ("kind", "dropped") if c in out.column_names])
    out = df[df["kind"] == "pane"]
    return out.drop(columns=[c for c in ("kind", "dropped") if c in out.columns])


def to_arrow(df: Any) -> pa.Table:
    """The batch as one Arrow table (a Spark DataFrame is collected with Arrow)."""
    if isinstance(df, pa.Table):
        return df
    if isinstance(df, pa.RecordBatch):
        return pa.Table.from_batches([df])
    if is_spark(df):
        return df.toArrow()
    import pandas as pd

    if isinstance(df, pd.DataFrame):
        return pa.Table.from_pandas(df, preserve_index=False)
    raise TypeError(f"a sink takes a Spark or pandas DataFrame or an Arrow table, not {df!r}")


def fan_out(*sinks: Sink | None) -> Sink:
    """One ``foreachBatch`` function calling each sink in turn with the same batch.

    :meth:`~headwater.api.WindowedAggregation.start` persists the micro-batch
    while its sinks run, so the panes are computed once. A sink that fails
    fails the batch; it is then re-run whole, hence every sink must be
    idempotent per batch id (those of :mod:`headwater.io.sinks` are).
    """
    chosen = [s for s in sinks if s is not None]
    for s in chosen:
        if not callable(s):
            raise TypeError(f"not a sink (f(batch, batch_id)): {s!r}")

    def sink(batch: Any, batch_id: int) -> None:
        for s in chosen:
            s(batch, batch_id)

    return sink
