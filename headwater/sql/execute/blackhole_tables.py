"""Blackhole sink tables in SQL scripts, declared as Flink declares them::

    CREATE TABLE discard_sink (auction BIGINT, price BIGINT)
      WITH ('connector' = 'blackhole');
    INSERT INTO discard_sink SELECT ...;

computes the query's whole changelog (every column, ``undo``, ``ptime``,
``ver``; on Spark's stateless path no ``ver`` and no ``ptime``, which it never
reads) and discards it, counting its rows
(:class:`~headwater.io.sinks.blackhole.BlackholeSink`): NEXMark's sink, which
times the query and not a sink. A blackhole is only a sink; options other than
``'connector'`` are an error naming the option.
"""

from __future__ import annotations

from headwater.io.sinks.blackhole import BlackholeSink
from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import SourceDef

SINK_OPTIONS = frozenset({"connector"})


def is_blackhole(d: SourceDef) -> bool:
    return d.options.get("connector", "").lower() == "blackhole"


def blackhole_sink(d: SourceDef) -> BlackholeSink:
    """The sink a ``'connector' = 'blackhole'`` table declares."""
    only = "A blackhole takes only 'connector' = 'blackhole'"
    d.check_options(SINK_OPTIONS, "blackhole sink", only)
    if d.event_time is not None:
        raise SqlError(
            f"blackhole table {d.name!r} is a sink: it takes no WATERMARK FOR and no query "
            "reads it",
            d.line,
            None,
            "Declare a source with a 'format' (parquet, csv, json, replay) or a connector "
            "that reads (kafka)",
        )
    return BlackholeSink(d.name)


__all__ = ["SINK_OPTIONS", "blackhole_sink", "is_blackhole"]
