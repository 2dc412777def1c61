"""Sinks for windowed results: a changelog, a current-results table, dead letters.

Every sink is a callable ``sink(batch, batch_id)``, the signature of Structured
Streaming's ``foreachBatch``, so it plugs into
:meth:`headwater.api.WindowedAggregation.start`::

    changelog = ChangelogSink("/data/scores/changelog")
    results = CurrentResultsSink("/data/scores.duckdb", aggregation=agg)  # DuckDB
    # or CurrentResultsSink("postgresql://user@host/db", aggregation=agg) # PostgreSQL
    agg.start(
        checkpoint_location="/data/scores/checkpoint",
        panes_sink=fan_out(changelog, results),
        dead_letter_sink=DeadLetterSink("/data/scores/dead_letters"),
    )

A micro-batch runs again after a failure (same ``batch_id``, same rows), so
every sink here is idempotent per batch id: the Parquet sinks overwrite the
directory ``<path>/batch_id=N``; the current-results table records the last
applied batch id in a metadata table, in the same transaction as the rows, and
skips batches it has already applied. ``batch`` may be a Spark DataFrame (the
streaming case), a pandas DataFrame or a pyarrow Table (e.g. the local
runner's panes). Anything else is a plain ``foreachBatch`` function; use
:func:`fan_out` to send the panes to several sinks.

Pane rows have the columns of :meth:`~headwater.api.WindowedAggregation.to_spark`
(:data:`headwater.model.schema.PANE_COLUMNS` is the metadata)::

    <key columns>, window_start, window_end, <aggregations>,
    timestamp, pane_index, nonspeculative_index, timing, is_first, is_last, is_retraction

(a batch with a ``kind`` column is taken as panes and other rows: the pane
sinks keep the rows of kind ``pane``). :class:`DeadLetterSink` takes the dead
letters as ``start(dead_letter_sink=...)`` passes them, and refuses a runner's
raw output.

The modules: :mod:`~headwater.io.sinks.batches` (batch input, :func:`fan_out`),
:mod:`~headwater.io.sinks.parquet` (the Parquet sinks),
:mod:`~headwater.io.sinks.results` (the current-results table and its exact
semantics), :mod:`~headwater.io.sinks.stores` (its DuckDB and PostgreSQL
backends) and :mod:`~headwater.io.sinks.delta` (a Delta Lake table view, one MERGE
per batch; the ``delta`` extra).
"""

from __future__ import annotations

from headwater.io.sinks.batches import fan_out
from headwater.io.sinks.parquet import ChangelogSink, DeadLetterSink, parquet_sink
from headwater.io.sinks.results import CurrentResultsSink, duckdb_results, postgres_results

__all__ = [
    "ChangelogSink",
    "DeadLetterSink",
    "CurrentResultsSink",
    "duckdb_results",
    "postgres_results",
    "fan_out",
    "parquet_sink",
]
