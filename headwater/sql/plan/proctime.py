"""PROCTIME() and FOR SYSTEM_TIME AS OF: processing time as a column.

A row's processing time is when it arrives: on a replay, the processing time of
the step that delivers it (:data:`~headwater.sql.plan.catalog.PTIME`). A
subquery (or a view) that only adds it to a stream, ``(SELECT *, PROCTIME() AS
p FROM s)``, becomes a stream of its own: ``s``'s rows with ``p`` their arrival
time, ``p`` its event time and a watermark that is the processing-time clock
(after each step, that step's processing time). Nothing is late, and a window
over ``p`` fires when the clock passes its end. The bounded query over the same
rows, each with its arrival time as ``p``, is what the stream equals.

``t FOR SYSTEM_TIME AS OF x.p`` (a lookup join) against a bounded table joins
each row with the table's only version: the plain join. At an event time against
a stream, it is a temporal join (:mod:`headwater.sql.plan.temporal`). Everything
else with PROCTIME() is refused before the query runs, at its position.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from sqlglot import exp

from headwater.model.arrays import distinct_sorted
from headwater.model.watermarks import BoundedOutOfOrderness, Punctuated
from headwater.sql.errors import SqlError, position
from headwater.sql.plan.catalog import PTIME, Catalog, Table
from headwater.sql.plan.temporal import versioned_join

_HINT = (
    "Add it to a stream in a subquery or view that only adds it, "
    "(SELECT *, PROCTIME() AS p_time FROM stream) AS B, and window or join on B.p_time"
)


def _refuse(message: str, node: exp.Expr, hint: str = _HINT) -> SqlError:
    return SqlError(message, *position(node), hint)


def _is_proctime(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "PROCTIME"


def with_processing_time(query: exp.Expr, catalog: Catalog) -> tuple[exp.Expr, Catalog]:
    """``query`` with each PROCTIME() subquery replaced by a stream of its own (added
    to a copy of ``catalog``) and each lookup join made a plain join; SqlError for
    a use of PROCTIME() or FOR SYSTEM_TIME AS OF that cannot be exact."""
    calls = [n for n in query.find_all(exp.Anonymous) if _is_proctime(n)]
    versions = list(query.find_all(exp.Version))
    if not calls and not versions:
        return query, catalog
    query = query.copy()
    derived = Catalog({t.name: t for t in catalog})
    columns: dict[str, str] = {}  # alias of a PROCTIME() subquery -> its column
    for call in [n for n in query.find_all(exp.Anonymous) if _is_proctime(n)]:
        subquery, table, column = _proctime_subquery(call, catalog)
        alias = subquery.alias_or_name or table.name
        stream = processing_time_stream(table, column, f"{table.name}__{column}")
        derived.add(stream)
        ref = exp.Table(this=exp.to_identifier(stream.name))
        ref.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        subquery.replace(ref)
        columns[alias.lower()] = column.lower()
    for version in list(query.find_all(exp.Version)):
        _lookup_join(version, derived, columns)
    return query, derived


def _proctime_subquery(call: exp.Expr, catalog: Catalog) -> tuple[exp.Subquery, Table, str]:
    """The subquery ``(SELECT *, PROCTIME() AS p FROM stream)`` around ``call``, the
    stream and ``p``; SqlError for any other use of PROCTIME()."""
    alias, select = call.parent, call.parent.parent if call.parent else None
    shape = (
        isinstance(alias, exp.Alias)
        and isinstance(select, exp.Select)
        and isinstance(select.parent, exp.Subquery)
        and isinstance(select.args.get("from_"), exp.From)
        and isinstance(select.args["from_"].this, exp.Table)
        and len(select.expressions) == 2
        and select.expressions[0].is_star
        and not any(
            select.args.get(a)
            for a in ("joins", "where", "group", "having", "qualify", "order", "limit", "distinct")
        )
    )
    if not shape or call.expressions:
        raise _refuse(
            "PROCTIME() is only supported as the column a subquery or view adds to a "
            "stream, SELECT *, PROCTIME() AS name FROM stream",
            call,
        )
    ref = select.args["from_"].this
    table = catalog.get(ref.name, ref)
    if not table.is_stream:
        raise _refuse(
            f"PROCTIME() of the bounded table {table.name!r}, whose rows never arrive",
            call,
            "Read it as a stream (a replay, a directory of arriving files), or drop PROCTIME()",
        )
    if alias.alias in table.columns:
        raise _refuse(f"{table.name!r} already has a column {alias.alias!r}", alias, "Rename it")
    return select.parent, table, alias.alias


def processing_time_stream(table: Table, column: str, name: str) -> Table:
    """``table``'s rows with ``column`` their arrival time, which is the event time,
    and the processing-time clock the watermark (nothing is ever late)."""
    common = {
        "name": name,
        "event_time": column,
        "allowed_lateness": 0,
        "types": {**table.types, column: "TIMESTAMP"},
        "correction": None,
    }
    if not table.is_replay:  # a live Spark stream: the time its micro-batch reads a row
        from pyspark.sql import functions as F

        spark = table.spark.withColumn(column, F.current_timestamp())
        return replace(table, spark=spark, watermark=BoundedOutOfOrderness(0), **common)
    frame = table.frame
    arrival = frame[PTIME].to_numpy(np.int64)
    times = distinct_sorted(arrival)
    return replace(
        table,
        frame=frame.assign(**{column: pd.to_datetime(arrival, unit="ms")}),
        watermark=Punctuated(),
        watermarks=pd.DataFrame({"ptime": times, "watermark": times}),
        **common,
    )


def _lookup_join(version: exp.Version, catalog: Catalog, columns: dict[str, str]) -> None:
    """``t FOR SYSTEM_TIME AS OF x.p`` in an inner or LEFT join, ``t`` bounded and
    ``x.p`` a PROCTIME() column: the plain join (``t`` has one version); ``t`` a
    stream and ``x.p`` an event time: a temporal join."""
    ref, at = version.parent, version.args.get("expression")
    join = ref.parent if ref is not None else None
    is_proctime = (
        isinstance(at, exp.Column)
        and columns.get(at.table.lower()) == at.name.lower()
        and version.args.get("kind") == "AS OF"
    )
    table = catalog.get(ref.name, ref)
    if table.is_stream and not is_proctime:  # at an event time: a temporal join
        versioned_join(version, table, catalog)
        return
    if not is_proctime:
        raise _refuse(
            f"FOR SYSTEM_TIME AS OF an event time against the bounded table {table.name!r}: "
            "a temporal join reads a versioned stream, a lookup join a PROCTIME() column",
            version,
            "Join the table at the processing time: FOR SYSTEM_TIME AS OF B.p_time with "
            "B = (SELECT *, PROCTIME() AS p_time FROM stream), or join without it",
        )
    if table.is_stream:
        raise _refuse(
            f"FOR SYSTEM_TIME AS OF a processing time against the stream {table.name!r}: "
            "a processing-time temporal join is not supported",
            version,
            "Join its versions at an event time (FOR SYSTEM_TIME AS OF o.order_time, with a "
            "PRIMARY KEY on the stream), look up a bounded table, or join without it",
        )
    side = (join.args.get("side") or "").upper() if isinstance(join, exp.Join) else None
    kind = (join.args.get("kind") or "").upper() if isinstance(join, exp.Join) else None
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise _refuse(
            "a lookup join (FOR SYSTEM_TIME AS OF) is an inner or LEFT join",
            version,
            "Write JOIN or LEFT JOIN ... FOR SYSTEM_TIME AS OF",
        )
    version.pop()
