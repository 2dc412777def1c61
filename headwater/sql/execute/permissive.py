"""Malformed lines of a Spark file stream as dead letters.

Spark reads a CSV or JSON directory of a script in PERMISSIVE mode
(:func:`headwater.sql.execute.spark.spark_source`): a line it cannot parse (a wrong
number of fields, a value not of its column's type, not JSON) is a row whose
:data:`~headwater.sql.plan.catalog.RAW_RECORD` holds the line. Such a row travels
with a NULL event time, so the runner routes it to the dead letters (never to
a window), carrying the line and its file; there it gets reason ``malformed``
and the raw-record columns of :data:`~headwater.model.schema.RAW_RECORD_COLUMNS`
(the line number is null: Spark's readers do not report it).
"""

from __future__ import annotations

from headwater.model.schema import DropReason
from headwater.sql.plan.catalog import RAW_RECORD, SOURCE_FILE, Table

#: Columns a permissive stream's rows carry to the runner's dead letters.
CARRIED = (RAW_RECORD, SOURCE_FILE)
#: What a malformed line of a Spark file stream has wrong with it.
ERROR = "not a record of the table (Spark's reader could not parse it)"


def event_time_sql(table: Table, column: str) -> str:
    """The Spark SQL of a row's event time: NULL for a malformed line."""
    if not table.permissive:
        return column
    return f"CASE WHEN `{RAW_RECORD}` IS NULL THEN {column} END"


def letter_columns(rows) -> tuple:
    """(the reason, the raw-record columns) of dead letters ``rows`` of the runner
    (a Spark DataFrame): ``malformed`` where the row is a line Spark could not parse."""
    from pyspark.sql import functions as F

    if RAW_RECORD not in rows.columns:
        return F.col("reason"), []
    raw = F.col(RAW_RECORD)
    reason = F.when(raw.isNotNull(), F.lit(DropReason.MALFORMED.value)).otherwise(F.col("reason"))
    return reason.alias("reason"), [
        F.when(raw.isNotNull(), F.col(SOURCE_FILE)).alias("source_file"),
        F.lit(None).cast("long").alias("source_line"),
        raw.alias("raw_record"),
        F.when(raw.isNotNull(), F.lit(ERROR)).alias("error"),
    ]
