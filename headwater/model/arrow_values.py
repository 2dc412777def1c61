"""Python values as Arrow arrays and back, exactly: the building blocks of the
state format (:mod:`headwater.model.state`) and of combiners' accumulator hooks.

Numbers, booleans, strings, bytes, None and lists of them map to Arrow types
(a dense union where kinds mix, so each value comes back as the same Python
type). Anything else (a user-defined accumulator object) goes through the one
escape hatch, the ``headwater.pickled`` extension type: per-value pickles
(cloudpickle where plain pickle cannot name the class).
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Sequence

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa


def exact_numpy(values: pd.Series) -> np.ndarray:
    """A column's values as numpy without changing any value: a nullable integer
    column with NULLs becomes objects (ints and None), where pandas would give
    floats that round integers past 2**53."""
    if pd.api.types.is_integer_dtype(values.dtype) and values.hasnans:
        return values.to_numpy(object, na_value=None)
    return values.to_numpy()


# ---------------------------------------------------------------- pickled values
class PickledType(pa.ExtensionType):
    """Binary values, each the pickle of one Python object (the escape hatch)."""

    def __init__(self) -> None:
        super().__init__(pa.large_binary(), "headwater.pickled")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized) -> PickledType:
        return cls()


try:
    pa.register_extension_type(PickledType())
except pa.ArrowKeyError:  # pragma: no cover - module reloaded
    pass


def _dumps_value(value) -> bytes:
    try:
        return pickle.dumps(value, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        # classes defined in __main__ or locally
        return cloudpickle.dumps(value, protocol=5)


def pickled_to_arrow(values: Sequence) -> pa.Array:
    storage = pa.array([_dumps_value(v) for v in values], type=pa.large_binary())
    return pa.ExtensionArray.from_storage(PickledType(), storage)


def _pickled_from_arrow(array: pa.Array) -> np.ndarray:
    return _object_array([pickle.loads(b) for b in array.storage.to_pylist()])


# ---------------------------------------------------------------- object values
_KIND = {
    type(None): "null",
    bool: "bool",
    np.bool_: "bool",
    int: "int",
    np.int64: "int",
    np.int32: "int",
    np.int16: "int",
    np.int8: "int",
    np.uint8: "int",
    np.uint16: "int",
    np.uint32: "int",
    float: "float",
    np.float64: "float",
    np.float32: "float",
    str: "str",
    np.str_: "str",
    bytes: "bytes",
    list: "list",
}
_ARROW = {
    "bool": pa.bool_(),
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.string(),
    "bytes": pa.binary(),
}


def _object_array(items: Sequence) -> np.ndarray:
    """A 1-d object array of ``items`` (lists stay elements)."""
    out = np.empty(len(items), dtype=object)
    if not any(isinstance(x, (list, tuple, np.ndarray)) for x in items):
        out[:] = items
        return out
    for i, x in enumerate(items):
        out[i] = x
    return out


def objects_to_arrow(values: Sequence) -> pa.Array:
    """Python values as an exact Arrow array (see the module docstring)."""
    values = list(values)
    kinds = {_KIND.get(t) for t in set(map(type, values))}
    if None in kinds:
        return pickled_to_arrow(values)
    kinds.discard("null")
    try:
        if not kinds:
            return pa.nulls(len(values))
        if kinds == {"list"}:
            return _lists_to_arrow(values)
        if len(kinds) == 1:
            return pa.array(values, type=_ARROW[kinds.pop()])
        if "list" not in kinds:
            return _union_to_arrow(values)
    except (pa.ArrowInvalid, OverflowError):  # e.g. an int beyond 64 bits
        pass
    return pickled_to_arrow(values)


def _lists_to_arrow(values: list) -> pa.Array:
    """Lists (or None) as a large list array of exactly encoded elements."""
    nulls = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    if nulls.any():
        values = [[] if v is None else v for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), out=offsets[1:])
    child = objects_to_arrow(list(itertools.chain.from_iterable(values)))
    if isinstance(child.type, PickledType):
        raise pa.ArrowInvalid("unsupported list element")
    mask = pa.array(nulls) if nulls.any() else None
    return pa.LargeListArray.from_arrays(pa.array(offsets), child, mask=mask)


def _union_to_arrow(values: list) -> pa.Array:
    kinds = [_KIND[type(v)] for v in values]
    names = sorted(set(kinds))
    code = {k: i for i, k in enumerate(names)}
    type_ids = np.fromiter((code[k] for k in kinds), dtype=np.int8, count=len(values))
    offsets = np.zeros(len(values), dtype=np.int32)
    children = []
    for i, k in enumerate(names):
        rows = np.flatnonzero(type_ids == i)
        offsets[rows] = np.arange(len(rows), dtype=np.int32)
        part = [values[r] for r in rows]
        children.append(pa.nulls(len(part)) if k == "null" else pa.array(part, type=_ARROW[k]))
    return pa.UnionArray.from_dense(
        pa.array(type_ids), pa.array(offsets), children, field_names=names
    )


def objects_from_arrow(array: pa.Array) -> np.ndarray:
    """The inverse of :func:`objects_to_arrow`: a 1-d object array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if isinstance(t, PickledType):
        return _pickled_from_arrow(array)
    if pa.types.is_null(t):
        return np.full(len(array), None, dtype=object)
    if array.null_count == 0 and (is_primitive(t) or pa.types.is_string(t)):
        return array.to_numpy(zero_copy_only=False).astype(object)
    out = np.empty(len(array), dtype=object)
    if (pa.types.is_large_list(t) or pa.types.is_list(t)) and array.null_count == 0:
        flat = objects_from_arrow(array.flatten()).tolist()
        offsets = array.offsets.to_numpy()
        offsets = offsets - offsets[0]
        for i in range(len(array)):  # lists stay elements
            out[i] = flat[offsets[i] : offsets[i + 1]]
    elif pa.types.is_large_list(t) or pa.types.is_list(t):
        for i, v in enumerate(array.to_pylist()):
            out[i] = v
    else:  # scalars (a union, or nulls)
        out[:] = array.to_pylist()
    return out


# ---------------------------------------------------------------- numpy columns
def array_to_arrow(array: np.ndarray) -> pa.Array:
    """A table column: primitives as such, object columns by :func:`objects_to_arrow`."""
    if array.dtype != object:
        return pa.array(array)
    return objects_to_arrow(array)


def array_from_arrow(array: pa.Array) -> np.ndarray:
    """The inverse of :func:`array_to_arrow` (a writable numpy array)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if array.null_count == 0 and (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    ):
        return array.to_numpy(zero_copy_only=False, writable=True)
    return objects_from_arrow(array)


def ndarrays_to_arrow(arrays: Sequence[np.ndarray], value_type=None) -> pa.Array:
    """Rows of 1-d numpy arrays (one dtype) as an Arrow large list array."""
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    parts = [np.asarray(a) for a in arrays if len(a)]
    if not parts:
        child = pa.array(np.empty(0), type=value_type or pa.float64())
    elif len({p.dtype for p in parts}) == 1 and parts[0].dtype != object:
        child = pa.array(np.concatenate(parts), type=value_type)
    else:  # mixed or object values: kept exactly, element by element
        child = objects_to_arrow([x for p in parts for x in p.tolist()])
        if isinstance(child.type, PickledType):
            return pickled_to_arrow(arrays)
    return pa.LargeListArray.from_arrays(pa.array(offsets), child)


def ndarrays_from_arrow(array: pa.Array) -> np.ndarray:
    """The inverse of :func:`ndarrays_to_arrow`: an object array of numpy arrays
    (empty rows are float64, as the built-in combiners create them)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array.type, PickledType):
        return _pickled_from_arrow(array)
    offsets = array.offsets.to_numpy()
    values = array.values
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        flat = np.asarray(values.to_pylist())
    elif values.null_count == 0 and (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    ):
        flat = values.to_numpy(zero_copy_only=False)
    else:
        flat = np.asarray(objects_from_arrow(values).tolist())
    out = np.empty(len(array), dtype=object)
    empty = np.empty(0)
    for i in range(len(array)):
        lo, hi = offsets[i], offsets[i + 1]
        out[i] = flat[lo:hi] if hi > lo else empty.copy()
    return out


def is_primitive(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
