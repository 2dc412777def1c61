"""The tables a query reads: their rows, event time and watermark.

A table is a stream (a replay of recorded arrivals, or a streaming Spark
DataFrame) or a bounded table (a pandas or Spark DataFrame, a fixed file set).
A stream declares its event-time column and where its watermark comes from:
watermark events of its replay (punctuated), or ``WATERMARK FOR col AS col -
INTERVAL ...`` (bounded out-of-orderness).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.model.watermarks import WatermarkStrategy
from headwater.sql.errors import SqlError
from headwater.sql.plan.stamps import STAMP, in_micros

#: Column of a replayed table's rows: their processing time (epoch ms).
PTIME = "__ptime"
#: Columns of a Spark file stream that only its dead letters show: the text of a
#: line Spark's reader could not parse (PERMISSIVE mode's corrupt record) and its file.
RAW_RECORD, SOURCE_FILE = "__hw_raw_record", "__hw_source_file"
#: The default Gamma of corrections: the hybrid model's 5 seconds.
GAMMA_MS = 5_000


@dataclass(frozen=True)
class Corrections:
    """Archive a stream's rows under ``archive`` (a directory per table) and correct
    the dead letters of the queries that read it once they span more than
    ``gamma`` ms of event time (:mod:`headwater.sql.execute.correct`)."""

    archive: str
    gamma: int = GAMMA_MS


@dataclass
class Table:
    """One table of the catalog. ``frame`` holds local rows (a replay's with
    :data:`PTIME`); ``spark`` a Spark DataFrame; ``watermarks`` a replay's
    watermark events (columns ``ptime``, ``watermark``, epoch ms);
    ``correction``: archive the rows and correct the dead letters of a query
    that reads the stream (:mod:`headwater.sql.execute.correct`); ``rejects``: lines of
    its files that are not records (:mod:`headwater.sql.execute.files`), dead letters of
    every query that reads it."""

    name: str
    frame: pd.DataFrame | None = None
    spark: Any = None
    event_time: str | None = None
    watermark: WatermarkStrategy | None = None
    allowed_lateness: int = 0
    watermarks: pd.DataFrame | None = None
    types: dict[str, str] = field(default_factory=dict)
    correction: Corrections | None = None
    rejects: pd.DataFrame | None = None
    #: a Spark file stream read in PERMISSIVE mode: it has :data:`RAW_RECORD` and
    #: :data:`SOURCE_FILE`, which are not columns of the table
    permissive: bool = False
    #: ``'state.ttl'`` (ms): how long a key's state is kept without a row of it,
    #: where the watermark does not free it (:mod:`headwater.sql.plan.ttl`)
    state_ttl: int | None = None
    #: the columns a versioned stream's rows are versions of (``PRIMARY KEY (...) NOT
    #: ENFORCED``): what a temporal join (FOR SYSTEM_TIME AS OF) looks a version up by
    primary_key: tuple[str, ...] = ()

    @property
    def is_replay(self) -> bool:
        return self.frame is not None and PTIME in self.frame.columns

    @property
    def is_stream(self) -> bool:
        return self.is_replay or bool(getattr(self.spark, "isStreaming", False))

    def arrow_types(self) -> dict[str, pa.DataType]:
        """Each column's Arrow type as a group's rows carry it (timestamps in µs, as
        a bounded query reads them: :mod:`headwater.sql.plan.stamps`)."""
        if self.frame is not None:
            return {c: _arrow_type(self.frame[c]) for c in self.columns}
        from pyspark.sql import types as T
        from pyspark.sql.pandas.types import to_arrow_type

        return {
            f.name: STAMP
            if isinstance(f.dataType, T.TimestampType | T.TimestampNTZType)
            else to_arrow_type(f.dataType)
            for f in self.spark.schema.fields
            if f.name in self.columns
        }

    def check_spark_event_time(self) -> None:
        """A Spark stream's event time must be a TIMESTAMP for Spark's watermark
        (``withWatermark``): SqlError naming the column otherwise, before the
        query is planned on the stream's internal layout."""
        from pyspark.sql import types as T

        if self.spark is None or self.event_time not in self.spark.columns:
            return
        kind = self.spark.schema[self.event_time].dataType
        if isinstance(kind, T.TimestampNTZType):
            raise SqlError(
                f"the event time {self.event_time!r} of stream {self.name!r} is TIMESTAMP_NTZ: "
                "a watermark on Spark needs a TIMESTAMP",
                hint=f"Cast it before passing the stream: "
                f"df.withColumn({self.event_time!r}, F.col({self.event_time!r}).cast('timestamp'))",
            )

    def local_frame(self) -> pd.DataFrame:
        """The rows of a bounded table in this process (a Spark table is collected),
        timestamps to the microsecond as every path reads them (:func:`in_micros`)."""
        if self.frame is not None:
            return in_micros(self.frame.drop(columns=[PTIME], errors="ignore"))
        return self.spark.toPandas()

    @property
    def columns(self) -> list[str]:
        if self.frame is not None:
            return [c for c in self.frame.columns if c != PTIME]
        if self.spark is not None:
            hidden = (RAW_RECORD, SOURCE_FILE) if self.permissive else ()
            return [c for c in self.spark.columns if c not in hidden]
        return list(self.types)


class Catalog:
    """Tables by name (case-insensitive, as SQL identifiers)."""

    def __init__(self, tables: Mapping[str, Table] | None = None) -> None:
        self._tables: dict[str, Table] = {}
        for table in (tables or {}).values():
            self.add(table)

    def add(self, table: Table) -> None:
        self._tables[table.name.lower()] = table

    def get(self, name: str, node=None) -> Table:
        table = self._tables.get(name.lower())
        if table is None:
            from headwater.sql.errors import position

            line, col = position(node) if node is not None else (None, None)
            known = ", ".join(sorted(t.name for t in self._tables.values())) or "none"
            raise SqlError(
                f"unknown table {name!r}",
                line,
                col,
                f"Known tables: {known}. Pass it in tables=... or --replay {name}=FILE",
            )
        return table

    def __iter__(self):
        return iter(self._tables.values())


def _arrow_type(column: pd.Series) -> pa.DataType:
    if pd.api.types.is_datetime64_any_dtype(column):
        return STAMP
    return pa.Array.from_pandas(column.iloc[:1000]).type


def as_replay(frame: pd.DataFrame, arrival_time: str) -> pd.DataFrame:
    """``frame`` as a recorded stream: each row arrives at its ``arrival_time``
    (a timestamp or epoch ms), which becomes its :data:`PTIME`."""
    arrival = event_millis(frame[arrival_time])
    if np.isnan(arrival).any():
        raise SqlError(f"the arrival-time column {arrival_time!r} has nulls: every row arrives")
    return frame.assign(**{PTIME: arrival.astype(np.int64)})


def event_millis(column: pd.Series) -> np.ndarray:
    """Event times as float epoch ms (NaN for NULL): timestamps or integer ms."""
    if pd.api.types.is_datetime64_any_dtype(column):
        values = column.dt.tz_localize(None) if column.dt.tz is not None else column
        ms = values.to_numpy("datetime64[ms]").astype(np.int64).astype(np.float64)
        ms[values.isna().to_numpy()] = np.nan
        return ms
    return pd.to_numeric(column, errors="coerce").to_numpy(np.float64)
