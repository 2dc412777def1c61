"""Logical column types: what a plan knows about a column, whatever the engine.

The plan is validated against these (a ``sum`` needs a numeric input, an
event time a timestamp or epoch milliseconds) and each runner maps them to its
own physical types (numpy/pandas/Arrow locally, Spark SQL types on Spark) in one
place. They are deliberately few: the distinctions an aggregation or a window
cares about, not every width of integer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa


@dataclass(frozen=True)
class DataType:
    """A logical type. Compare with ``==``; print for error messages."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_numeric(self) -> bool:
        return self.name in ("int64", "float64") or isinstance(self, DecimalType)

    @property
    def is_orderable(self) -> bool:
        return self.is_numeric or self.name in ("boolean", "string", "timestamp", "date")


@dataclass(frozen=True)
class DecimalType(DataType):
    """Fixed-point numbers (SQL ``DECIMAL(p, s)``)."""

    precision: int = 38
    scale: int = 18

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True)
class ListType(DataType):
    """A list of values of one type (``collect_list``, ``top_k``, quantiles)."""

    element: DataType = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return f"list<{self.element}>"


BOOLEAN = DataType("boolean")
#: Integers of any width (an aggregation's integer result is 64-bit).
INT64 = DataType("int64")
FLOAT64 = DataType("float64")
STRING = DataType("string")
BINARY = DataType("binary")
DATE = DataType("date")
#: An instant, microsecond or millisecond precision; the core works in epoch ms.
TIMESTAMP = DataType("timestamp")
#: A Python object no engine type describes (a user combiner's output): runs
#: locally, and on Spark only with a declared output type.
OBJECT = DataType("object")


def list_of(element: DataType) -> ListType:
    return ListType("list", element)


def decimal(precision: int, scale: int) -> DecimalType:
    return DecimalType("decimal", precision, scale)


def of_arrow(t: pa.DataType) -> DataType:
    """The logical type of an Arrow type."""
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_integer(t):
        return INT64
    if pa.types.is_floating(t):
        return FLOAT64
    if pa.types.is_decimal(t):
        return decimal(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STRING
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BINARY
    if pa.types.is_timestamp(t):
        return TIMESTAMP
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return list_of(of_arrow(t.value_type))
    return OBJECT


def of_pandas(series: pd.Series) -> DataType:
    """The logical type of a pandas column (object columns by their non-null values)."""
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return BOOLEAN
    if pd.api.types.is_integer_dtype(dtype):
        return INT64
    if pd.api.types.is_float_dtype(dtype):
        return FLOAT64
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return TIMESTAMP
    if isinstance(dtype, pd.StringDtype):
        return STRING
    values = series.dropna()
    if not len(values):
        return OBJECT
    try:
        return of_arrow(pa.array(values.head(1000).tolist()).type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return OBJECT


def of_python(value: object) -> DataType:
    """The logical type of one Python value (used to infer a user combiner's output)."""
    if isinstance(value, (bool, np.bool_)):
        return BOOLEAN
    if isinstance(value, (int, np.integer)):
        return INT64
    if isinstance(value, (float, np.floating)):
        return FLOAT64
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes):
        return BINARY
    if isinstance(value, (pd.Timestamp, np.datetime64)):
        return TIMESTAMP
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        return list_of(of_python(items[0]) if items else FLOAT64)
    return OBJECT


def sample_value(t: DataType) -> object:
    """A value of type ``t``, to probe a user combiner's output type."""
    samples: dict[str, object] = {
        "boolean": True,
        "int64": 1,
        "float64": 1.0,
        "string": "a",
        "binary": b"a",
        "timestamp": pd.Timestamp(0, unit="ms"),
        "date": pd.Timestamp(0).date(),
    }
    if isinstance(t, DecimalType):
        return 1.0
    if isinstance(t, ListType):
        return [sample_value(t.element)]
    return samples.get(t.name, 1)
