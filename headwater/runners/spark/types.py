"""The one mapping between headwater's logical types and Spark SQL types.

:mod:`headwater.model.types` says what a plan knows about a column; this module
says what that is on Spark (:func:`to_spark`, :func:`of_spark`), and how a pandas
output column of the core becomes a column Arrow can hand to Spark with that
type (:func:`to_spark_pandas`: NaN of a NULL output becomes a real null).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from headwater.model import types as HT
from headwater.model.types import DataType, DecimalType, ListType

__all__ = ["millis_to_timestamp", "of_spark", "to_spark", "to_spark_pandas"]

# The instants a Spark TIMESTAMP holds in practice (and Python's datetime can
# collect): 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z, in epoch ms.
SPARK_MIN_MS = -62_135_596_800_000
SPARK_MAX_MS = 253_402_300_799_999

_TO_SPARK: dict[DataType, T.DataType] = {
    HT.BOOLEAN: T.BooleanType(),
    HT.INT64: T.LongType(),
    HT.FLOAT64: T.DoubleType(),
    HT.STRING: T.StringType(),
    HT.BINARY: T.BinaryType(),
    HT.DATE: T.DateType(),
    HT.TIMESTAMP: T.TimestampType(),
}


def to_spark(t: DataType, *, what: str = "a column") -> T.DataType:
    """The Spark SQL type of the logical type ``t``.

    ``OBJECT`` (a Python object no engine type describes) has none: the error
    asks for a declared output type.
    """
    if isinstance(t, DecimalType):
        return T.DecimalType(t.precision, t.scale)
    if isinstance(t, ListType):
        return T.ArrayType(to_spark(t.element, what=what))
    spark_type = _TO_SPARK.get(t)
    if spark_type is None:
        raise TypeError(
            f"{what} has logical type {t}, which has no Spark SQL type: declare the "
            "combiner's output type (`output = types.FLOAT64`, ... from "
            "headwater.model.types)"
        )
    return spark_type


def of_spark(t: T.DataType | None) -> DataType | None:
    """The logical type of a Spark SQL type (None stays None: no input column)."""
    if t is None:
        return None
    if isinstance(t, T.BooleanType):
        return HT.BOOLEAN
    if isinstance(t, T.IntegralType):
        return HT.INT64
    if isinstance(t, T.DecimalType):
        return HT.decimal(t.precision, t.scale)
    if isinstance(t, T.FractionalType):
        return HT.FLOAT64
    if isinstance(t, (T.StringType, T.VarcharType, T.CharType)):
        return HT.STRING
    if isinstance(t, T.BinaryType):
        return HT.BINARY
    if isinstance(t, (T.TimestampType, T.TimestampNTZType)):
        return HT.TIMESTAMP
    if isinstance(t, T.DateType):
        return HT.DATE
    if isinstance(t, T.ArrayType):
        element = of_spark(t.elementType)
        return HT.list_of(element if element is not None else HT.OBJECT)
    return HT.OBJECT


def to_spark_pandas(values, t: T.DataType):
    """A core output column (numpy array or Series) ready for Arrow as Spark type ``t``.

    NULLs of the core are NaN in numeric columns and None elsewhere; an
    integral column becomes a nullable ``Int64`` array (exact, with real nulls),
    a fractional one float64 (NaN is read as null by PySpark's conversion).
    Columns that came through the reducer's retraction path are object arrays:
    they are converted the same way.
    """
    if isinstance(t, T.IntegralType):
        s = pd.Series(values)
        if s.dtype.kind in "iu" and not isinstance(s.dtype, pd.api.extensions.ExtensionDtype):
            return s.to_numpy(np.int64)
        try:  # exact for Python ints in object columns
            return s.astype("Int64").array
        except (TypeError, ValueError):
            return pd.to_numeric(s).astype("Float64").astype("Int64").array
    if isinstance(t, (T.DoubleType, T.FloatType)):
        s = pd.Series(values)
        if s.dtype == object:
            s = pd.to_numeric(s, errors="coerce")
        return s.to_numpy(np.float64, na_value=np.nan)
    return values.to_numpy() if isinstance(values, pd.Series) else values


def millis_to_timestamp(col: Column | str) -> Column:
    """Epoch milliseconds as a Spark ``TIMESTAMP``; null outside years 1 to 9999.

    Only the global window's bounds (+-2**62 ms, "the ends of time") and its
    END_OF_WINDOW output timestamp fall outside, so in timestamp form they are
    null, on the bounded and the streaming runner alike.
    """
    c = F.col(col) if isinstance(col, str) else col
    return F.when(c.between(SPARK_MIN_MS, SPARK_MAX_MS), F.timestamp_millis(c))
