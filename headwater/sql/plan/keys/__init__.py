"""The maintenance key of a streaming query: what every operator that combines
rows partitions by.

A streaming query is maintained per group of rows: a group's result is the
query over the group's rows, and the whole result is the union of the groups'
results. That is exact when every operator that combines rows (an aggregate,
DISTINCT, a window function, a join of two streams, a set operation, a
subquery, a LIMIT) only combines rows of one group, i.e. when the group key is
a function of what each such operator partitions by. This module derives, from
the query's text alone (planning never reads data), the columns each combining
operator partitions by, traced through aliases, subqueries and CTEs back to the
streams' columns (``window_start AS starttime`` is still the window start), and
the query's key: the parts common to all of them.

A key part is the window (window bounds: groups are windows, freed by the
watermark), the event time (groups are instants, freed by the watermark), a
bucket of the event time (``CAST(ts AS DATE)``: groups are its days, freed by the
watermark as tumbling windows; :mod:`headwater.sql.plan.buckets`), an interval
join's bound (``o.t BETWEEN s.t - INTERVAL '4' SECOND AND s.t + INTERVAL '2'
SECOND``: groups are buckets of one side's event time holding the other side's
rows that far around them, freed by the watermark), or a plain
column of every stream (groups are that column's values, kept forever:
state grows with the distinct values). No part at all is one group holding
every row. A query with no combining operator is exact per row.

The package by concern: :mod:`~headwater.sql.plan.keys.kinds` (origins, the key
and its ``explain()`` text), :mod:`~headwater.sql.plan.keys.trace` (columns traced
through aliases, subqueries and CTEs), :mod:`~headwater.sql.plan.keys.operators`
and :mod:`~headwater.sql.plan.keys.joins` (what each combining operator
partitions by), :mod:`~headwater.sql.plan.keys.derive` (the key).
"""

from __future__ import annotations

from headwater.sql.plan.keys.derive import derive_key
from headwater.sql.plan.keys.kinds import (
    WINDOW_COLUMNS,
    KeyKind,
    KeyPart,
    MaintenanceKey,
    Partition,
)
from headwater.sql.plan.keys.operators import check_session_keys, partitions

__all__ = [
    "WINDOW_COLUMNS",
    "KeyKind",
    "KeyPart",
    "MaintenanceKey",
    "Partition",
    "check_session_keys",
    "derive_key",
    "partitions",
]
