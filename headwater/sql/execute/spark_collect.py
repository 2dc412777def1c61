"""A Spark streaming query run to the end of its input, its output collected:
the one driver loop both Spark paths of SQL (general and fast) share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

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


#: Spark's integer types (as Arrow gives them) as pandas' nullable integers, as
#: DuckDB gives an integer column with a NULL on the local runner.
_NULLABLE = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
}


def as_pandas(df) -> pd.DataFrame:
    """A Spark DataFrame collected as pandas, an integer column with a NULL as
    nullable integers (toPandas makes it float64: a value past 2**53 would
    change, and the dtype would differ from the local runner's); the others
    as toPandas gives them."""
    frame = df.toPandas()
    integral = ("ByteType", "ShortType", "IntegerType", "LongType")
    nulls = [
        f.name
        for f in df.schema.fields
        if type(f.dataType).__name__ in integral and frame[f.name].dtype.kind == "f"
    ]
    if nulls:  # the exact values, read again through Arrow (a persisted batch)
        exact = df.select(*[f"`{c.replace('`', '``')}`" for c in nulls]).toArrow()
        for position, name in enumerate(nulls):
            column = exact.column(position)
            frame[name] = column.to_pandas(types_mapper=_NULLABLE.get).array
    return frame


def run_persisted(run, batch, batch_id: int) -> None:
    """``run(batch, batch_id)`` over the micro-batch persisted: it reads the batch
    more than once, and the stateful operator above it must run once."""
    batch = batch.persist()
    try:
        run(batch, batch_id)
    finally:
        batch.unpersist()


def collect_to_end(out, fields: Sequence[str], checkpoint: str) -> Collected:
    """Run ``out`` with ``availableNow`` from ``checkpoint``; each micro-batch is
    computed once (persisted) for its two outputs, and a failed query raises."""
    parts: list[pd.DataFrame] = []
    letters: list[pd.DataFrame] = []

    def each_batch(batch, batch_id: int) -> None:
        batch = batch.persist()
        try:
            parts.append(as_pandas(changes(batch, list(fields))))
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
