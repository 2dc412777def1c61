"""Delta Lake sink tables in SQL scripts, declared with a connector option::

    CREATE TABLE Winners (window_start TIMESTAMP, window_end TIMESTAMP, item VARCHAR)
      WITH ('connector' = 'delta', 'path' = '/data/winners',
            'key.fields' = 'window_start;window_end');
    INSERT INTO Winners SELECT ...;

keeps the Delta table at ``'path'`` equal to the query's table view
(:class:`~headwater.io.sinks.delta.DeltaSink`: one MERGE per batch, replays
change nothing). ``'key.fields'`` (``;``-separated, as Flink's), or the table's
``PRIMARY KEY (...) NOT ENFORCED``, names the
columns that identify a result row: the last change per key decides; without
it the table holds the relation as a multiset (a row count ``__n`` per
distinct row). Options other than :data:`SINK_OPTIONS` are an error naming
the option.
"""

from __future__ import annotations

from headwater.io.sinks.delta import DeltaSink
from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import SourceDef

SINK_OPTIONS = frozenset({"connector", "path", "key.fields"})


def is_delta(d: SourceDef) -> bool:
    return d.options.get("connector", "").lower() == "delta"


def delta_sink(d: SourceDef) -> DeltaSink:
    """The Delta sink a ``'connector' = 'delta'`` table declares."""
    d.check_options(SINK_OPTIONS, "Delta sink")
    if d.event_time is not None:
        raise SqlError(f"Delta table {d.name!r} is a sink: it takes no WATERMARK FOR", d.line)
    if "path" not in d.options:
        raise SqlError(f"Delta sink {d.name!r} has no 'path'", d.line, None, "Add 'path' = ...")
    keys = d.key_fields()
    return DeltaSink(d.options["path"], key=keys or None, sink_id=f"headwater:{d.name}")


__all__ = ["SINK_OPTIONS", "delta_sink", "is_delta"]
