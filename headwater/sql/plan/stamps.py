"""How a stream's timestamp columns travel through the union layouts and the state.

The model's event time is epoch ms (watermarks, windows, panes). A timestamp
*column* is a value, and a bounded query (DuckDB's, Spark's) reads it to the
microsecond: so every path carries it as exact epoch µs (int64, never a float,
which rounds past 2**53 µs) and gives it back as a ``TIMESTAMP`` in µs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

#: The Arrow type a stream's timestamp column has in the queries of every path.
STAMP = pa.timestamp("us")


def stamp_micros(column: pd.Series) -> np.ndarray:
    """A timestamp column as epoch µs: int64, or objects (ints and None) where a
    value is NULL."""
    values = column.dt.tz_localize(None) if column.dt.tz is not None else column
    micros = values.to_numpy("datetime64[us]").astype(np.int64)
    missing = values.isna().to_numpy()
    if not missing.any():
        return micros
    out = micros.astype(object)
    out[missing] = None
    return out


def micros_array(values: np.ndarray, arrow_type: pa.DataType = STAMP) -> pa.Array:
    """Epoch µs (ints, or objects with None; floats with NaN as a runner may hand
    them) as an Arrow timestamp column of ``arrow_type``."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        missing = np.isnan(values)
        micros = pa.array(np.where(missing, 0, np.round(values)).astype(np.int64), mask=missing)
    elif values.dtype == object:
        micros = pa.array(pd.Series(values, dtype=object), pa.int64(), from_pandas=True)
    else:
        micros = pa.array(values.astype(np.int64), pa.int64())
    return micros.cast(STAMP).cast(arrow_type)


def micros_as_stamps(values: np.ndarray) -> np.ndarray:
    """Epoch µs as numpy ``datetime64[us]`` (NaT for NULL)."""
    return micros_array(values).to_numpy(zero_copy_only=False)


def in_micros(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its timestamp columns' nanoseconds dropped (a copy only when
    one has any): SQL's TIMESTAMP is to the microsecond in DuckDB and Spark, and a
    pandas column's nanoseconds would otherwise reach only a bounded local query."""
    finer = {}
    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_datetime64_any_dtype(values) and values.dt.nanosecond.any():
            finer[column] = values.dt.floor("us")
    return frame.assign(**finer) if finer else frame
