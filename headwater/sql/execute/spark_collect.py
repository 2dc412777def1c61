"""A Spark streaming query run to the end of its input, its output collected:
the one driver loop both Spark paths of SQL (general and fast) share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from headwater.runners.spark.output import changes, dead_letters
from headwater.runners.spark.session import starting_query


class SparkRunError(RuntimeError):
    """The streaming query failed; the message is Spark's."""


@dataclass(frozen=True)
class Collected:
    """What the run emitted: the changelog rows (``fields``) and the dead letters
    as the runner wrote them (empty: none)."""

    changelog: pd.DataFrame
    dead_letters: pd.DataFrame


def collect_to_end(out, fields: Sequence[str], checkpoint: str) -> Collected:
    """Run ``out`` with ``availableNow`` from ``checkpoint``; each micro-batch is
    computed once (persisted) for its two outputs, and a failed query raises."""
    parts: list[pd.DataFrame] = []
    letters: list[pd.DataFrame] = []

    def each_batch(batch, batch_id: int) -> None:
        batch = batch.persist()
        try:
            parts.append(changes(batch, list(fields)).toPandas())
            dropped = dead_letters(batch).toPandas()
            if len(dropped):
                letters.append(dropped)
        finally:
            batch.unpersist()

    writer = (
        out.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    with starting_query(out.sparkSession):
        query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise SparkRunError(str(query.exception()))
    full = [p for p in parts if len(p)]
    log = pd.concat(full, ignore_index=True) if full else pd.DataFrame(columns=list(fields))
    dropped = pd.concat(letters, ignore_index=True) if letters else pd.DataFrame()
    return Collected(log, dropped)
