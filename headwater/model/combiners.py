"""What is computed: combiners in the create / add / merge / extract style.

Accumulators are columns (dicts of numpy arrays, one row per window), so a
bundle is folded into its windows with grouped numpy operations:

* ``add(values, groups, n)``: accumulators of ``n`` groups from raw values;
* ``merge(acc, groups, n)``: fold accumulator rows into ``n`` groups;
* ``extract(acc)``: the output column.

``merge`` takes over its inputs: it may return an input's accumulator object, and
update it in place (``CountDistinct`` does), so a caller passes only accumulators
it reads no more (the reducer's own windows', replaced by the result).

A user combiner may implement only the scalar methods (``create_accumulator``,
``add_input``, ``merge_accumulators``, ``extract_output``, as in Beam); the
base class then runs them once per group (a documented slow path). A combiner
with an inverse (``subtract``) lets consumers apply retractions cheaply.

Nulls follow SQL on every runner: inputs that are null (None, NaN) are skipped,
and SUM, MEAN, MIN and MAX of a window with no non-null input are NULL, while
``Count()`` counts rows and ``Count(skip_nulls=True)`` (``count(col)``) counts
non-null values (0 for none). Locally a NULL output is NaN in a numeric column
and None in any other: a column of integer sums that holds a NULL becomes
float64, which is exactly what ``toPandas()`` makes of Spark's nullable
``BIGINT`` column with nulls, so ``to_pandas()`` compares equal across the local
runner, bounded Spark and streaming Spark. (Spark outputs are real nulls of
the declared type; the streaming runner turns NaN back into them.)

Types: every combiner declares which logical input types it accepts
(:meth:`CombineFn.accepts`, :meth:`CombineFn.check_input`) and its output type
(:meth:`CombineFn.output_type`, :mod:`headwater.model.types`). A user combiner
may declare ``output = <DataType>``; otherwise its output type is inferred by
running it on a sample value of the input type.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.model import arrow_values
from headwater.model import types as HT
from headwater.model.lists import empty_tuples, split_list
from headwater.model.types import DataType

Acc = dict[str, np.ndarray]


def object_array(items) -> np.ndarray:
    """A 1-d object array of ``items`` (numpy would otherwise nest lists)."""
    items = list(items)
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _with_empty_tuples(out: np.ndarray, owners: np.ndarray) -> np.ndarray:
    """``out`` with an empty tuple in each place that ``owners`` (distinct) does not
    name."""
    if len(owners) < len(out):
        absent = np.ones(len(out), dtype=bool)
        absent[owners] = False
        out[absent] = empty_tuples(int(absent.sum()))
    return out


#: each sequence of an object array as a tuple (a tuple is itself: no copy), in C
_as_tuples = np.frompyfunc(tuple, 1, 1)
#: each sequence of an object array as a new list, in C
_as_lists = np.frompyfunc(list, 1, 1)


def _empty_value_sets(n: int) -> np.ndarray:
    """``n`` new empty value sets (dicts: see :class:`CountDistinct`), as an object
    array."""
    return np.fromiter(map(dict.fromkeys, itertools.repeat((), n)), dtype=object, count=n)


def _plain(values) -> list:
    """Values as plain Python scalars, the form a value set compares (times as their
    integer ticks, so that a value compares equal after a state's round trip)."""
    if isinstance(values, np.ndarray):
        return (values.view(np.int64) if values.dtype.kind in "mM" else values).tolist()
    return list(values)


def _runs(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stable order that sorts ``groups``, each run's group and where it starts."""
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    cuts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return order, ordered[cuts], cuts


def _ranks(cuts: np.ndarray, size: int) -> np.ndarray:
    """Each sorted element's rank within its run (runs starting at ``cuts``)."""
    return np.arange(size) - np.repeat(cuts, np.diff(np.r_[cuts, size]))


def _folded(items: np.ndarray, groups: np.ndarray, out: np.ndarray, fold) -> np.ndarray:
    """``items`` folded into their groups' places of ``out`` in order: each group's
    first item, then ``fold(sofar, nexts)`` (element-wise over object arrays) once per
    rank of an item within its group, not once per item."""
    if not len(groups):
        return out
    order, owners, cuts = _runs(groups)
    rank = _ranks(cuts, len(groups))
    owner, items = groups[order], items[order]
    out[owners] = items[rank == 0]
    for r in range(1, int(rank.max()) + 1):
        at = rank == r
        out[owner[at]] = fold(out[owner[at]], items[at])
    return out


def _updated(held: np.ndarray, more: np.ndarray) -> np.ndarray:
    """Each dict of ``held`` updated in place with its match in ``more``, in C."""
    collections.deque(map(dict.update, held, more), maxlen=0)
    return held


def occurrences(keys: np.ndarray) -> np.ndarray:
    """Each element's occurrence number among the equal elements before it (as
    pandas' ``cumcount``), by one stable sort."""
    keys = np.asarray(keys)
    out = np.empty(len(keys), dtype=np.int64)
    if len(keys):
        order, _, cuts = _runs(keys)
        out[order] = _ranks(cuts, len(keys))
    return out


def _non_null(values, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop null inputs (None, NaN), as SQL aggregates do."""
    values = np.asarray(values)
    if values.dtype.kind in "iub":
        return values, groups
    valid = ~pd.isna(values)
    if valid.all():
        return values, groups
    kept = values[valid]
    if kept.dtype == object and len(kept):
        kept = np.asarray(kept.tolist())  # recover the type the nulls had hidden
    return kept, groups[valid]


def _grouped_sum(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """Per-group sums keeping integer types; groups without input sum to 0 (the
    accumulator's identity: :class:`Sum` tells such groups apart by its count)."""
    values = np.asarray(values)
    if values.dtype.kind in "iub":
        out = np.zeros(n, dtype=np.int64)
        np.add.at(out, groups, values)
        return out
    if values.dtype.kind == "f":
        return np.bincount(groups, weights=values, minlength=n)
    out = pd.Series(values).groupby(groups).sum()
    return out.reindex(range(n), fill_value=0).to_numpy()


def _nulls_where(out: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """``out`` with NULL where ``empty``: NaN in a numeric column (which becomes
    float64, as a nullable BIGINT with nulls does in ``toPandas()``), else None."""
    if not empty.any():
        return out
    if out.dtype.kind in "iufb":
        out = out.astype(np.float64)
        out[empty] = np.nan
        return out
    out = out.astype(object)
    out[empty] = None
    return out


def _counts(groups: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Per-group element counts (or sums of integer ``weights``) as int64."""
    if weights is None:
        return np.bincount(groups, minlength=n).astype(np.int64)
    return np.bincount(groups, weights=weights, minlength=n).astype(np.int64)


def _grouped_extreme(values: np.ndarray, groups: np.ndarray, n: int, how: str):
    """Per-group min or max of any orderable dtype (groups without input are undefined)."""
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        if values.dtype.kind == "f":
            out = np.full(n, np.inf if how == "min" else -np.inf)
        else:
            info = np.iinfo(np.int64)
            out = np.full(n, info.max if how == "min" else info.min, dtype=np.int64)
        (np.minimum if how == "min" else np.maximum).at(out, groups, values)
        return out
    if values.dtype == object and len(values):
        try:
            return _sorted_extreme(values, np.asarray(groups), n, how)
        except TypeError:  # values of types that do not compare: pandas says which
            pass
    result = getattr(pd.Series(values, dtype=object).groupby(groups), how)()
    out = np.empty(n, dtype=object)
    out[result.index.to_numpy()] = result.to_numpy()
    return out


def _sorted_extreme(values: np.ndarray, groups: np.ndarray, n: int, how: str) -> np.ndarray:
    """Per-group min or max of Python objects (strings, decimals) by one sort of
    the values and a stable one of their groups: pandas' grouped min/max of
    objects runs a Python loop per group."""
    order = np.argsort(values, kind="stable")
    order = order[np.argsort(groups[order], kind="stable")]
    g = groups[order]
    change = g[1:] != g[:-1]
    at = np.flatnonzero(np.r_[True, change] if how == "min" else np.r_[change, True])
    out = np.empty(n, dtype=object)
    out[g[at]] = values[order[at]]
    return out


def _is_null(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists, arrays: not a scalar null
        return False


def _infer_output_type(fn: CombineFn, input_type: DataType | None) -> DataType:
    """The type of ``fn``'s output on 1, 2 and 3 copies of a sample input value
    (through its own add, merge and extract); the first non-null output wins."""
    sample = HT.sample_value(input_type) if input_type is not None else 0
    problem: BaseException | None = None
    for size in (1, 2, 3):
        try:
            values = pd.Series([sample] * size).to_numpy()
            groups = np.zeros(size, dtype=np.int64)
            acc = fn.merge(fn.add(values, groups, 1), np.zeros(1, dtype=np.int64), 1)
            value = fn.extract(acc)[0]
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot infer"
            problem = exc
            continue
        if not _is_null(value):
            return HT.of_python(value)
    why = f" (running it raised {type(problem).__name__}: {problem})" if problem else ""
    raise TypeError(
        f"cannot infer the output type of {fn!r} over {input_type or 'no input'} from a "
        f"sample value{why}: declare it, e.g. `output = types.FLOAT64` in the class "
        f"{type(fn).__name__} (types: headwater.model.types)"
    )


class CombineFn:
    """Base combiner. Override the vectorized methods, or the scalar ones."""

    #: Name of the output when a pane carries a single aggregation.
    name = "combine"
    #: Whether :meth:`subtract` is implemented (an inverse, for retractions).
    has_inverse = False
    #: The output's logical type, if declared (class or instance attribute);
    #: otherwise :meth:`output_type` infers it by running the combiner on a sample.
    output: DataType | None = None

    # -- types (pure: what a logical plan validates against) --
    def input_error(self, input_type: DataType | None) -> str | None:
        """Why this combiner cannot aggregate values of ``input_type``, or None if it
        can (``input_type`` None: the aggregation reads no column). User combiners
        accept anything unless they override this."""
        return None

    def accepts(self, input_type: DataType | None) -> bool:
        """Whether this combiner can aggregate values of ``input_type``."""
        return self.input_error(input_type) is None

    def check_input(self, input_type: DataType | None, column: str | None = None) -> None:
        """Raise a ``TypeError`` naming the column and the reason if not :meth:`accepts`."""
        reason = self.input_error(input_type)
        if reason is not None:
            what = f"column {column!r} of type {input_type}" if column else f"{input_type}"
            raise TypeError(f"{self!r} cannot aggregate {what}: {reason}")

    def output_type(self, input_type: DataType | None) -> DataType:
        """The logical type of the output for inputs of ``input_type``.

        Built-in combiners compute it; a user combiner returns its declared
        ``output``, or else the type of what it computes from a sample value of
        ``input_type`` (:func:`headwater.model.types.sample_value`), or raises a
        ``TypeError`` asking for a declaration when that fails.
        """
        declared = self.output
        if declared is not None:
            if not isinstance(declared, DataType):
                raise TypeError(
                    f"{type(self).__name__}.output must be a headwater.model.types.DataType "
                    f"(e.g. types.FLOAT64), got {declared!r}"
                )
            return declared
        return _infer_output_type(self, input_type)

    # -- scalar API (Beam style), used by the default vectorized methods --
    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add_input(self, accumulator: Any, value: Any) -> Any:
        raise NotImplementedError

    def merge_accumulators(self, accumulators: list[Any]) -> Any:
        raise NotImplementedError

    def extract_output(self, accumulator: Any) -> Any:
        raise NotImplementedError

    # -- vectorized API --
    def create(self, n: int) -> Acc:
        acc = np.empty(n, dtype=object)
        for i in range(n):
            acc[i] = self.create_accumulator()
        return {"acc": acc}

    def add(self, values: np.ndarray, groups: np.ndarray, n: int) -> Acc:
        acc = self.create(n)["acc"]
        for i, v in zip(groups, values, strict=True):
            acc[i] = self.add_input(acc[i], v)
        return {"acc": acc}

    def merge(self, acc: Acc, groups: np.ndarray, n: int) -> Acc:
        buckets: list[list[Any]] = [[] for _ in range(n)]
        for g, a in zip(groups, acc["acc"], strict=True):
            buckets[g].append(a)
        out = np.empty(n, dtype=object)
        for i, bucket in enumerate(buckets):
            out[i] = self.merge_accumulators(bucket) if bucket else self.create_accumulator()
        return {"acc": out}

    def extract(self, acc: Acc) -> np.ndarray:
        out = np.empty(len(acc["acc"]), dtype=object)
        for i, a in enumerate(acc["acc"]):
            out[i] = self.extract_output(a)
        return out

    def subtract(self, acc: Acc, other: Acc) -> Acc:
        """``acc`` minus ``other`` row by row (only when ``has_inverse``)."""
        raise NotImplementedError(f"{type(self).__name__} has no inverse")

    # -- state format (headwater.model.state) --
    def accumulator_to_arrow(self, field: str, array: np.ndarray) -> pa.Array:
        """Accumulator column ``field`` as an Arrow array, for the state format.

        The default maps numeric columns to Arrow primitives and object columns
        of plain values (None, bool, int, float, str, bytes, lists of them) to
        their Arrow types; other objects (a user-defined accumulator) become
        per-value pickles flagged ``headwater.pickled``, the format's one escape
        hatch. Override both hooks for a compact, pickle-free encoding.
        """
        return arrow_values.array_to_arrow(array)

    def accumulator_from_arrow(self, field: str, array: pa.Array) -> np.ndarray:
        """The inverse of :meth:`accumulator_to_arrow` (a writable numpy column)."""
        return arrow_values.array_from_arrow(array)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _numeric_error(input_type: DataType | None) -> str | None:
    if input_type is None:
        return "it needs an input column"
    if not input_type.is_numeric:
        return f"it needs a numeric input (int64, float64 or decimal), got {input_type}"
    return None


class Sum(CombineFn):
    """Sum of the non-null inputs; NULL (NaN locally) for a window with none, as SQL.

    The accumulator keeps the non-null count ``n`` beside the sum, so that an
    all-null window (or one whose inputs were retracted) is told apart from a
    sum of 0. Integer sums stay exact int64 while no window is NULL.
    """

    name = "sum"
    has_inverse = True

    def input_error(self, input_type):
        return _numeric_error(input_type)

    def output_type(self, input_type):
        if isinstance(input_type, HT.DecimalType):  # as Spark: 10 more digits
            return HT.decimal(min(38, input_type.precision + 10), input_type.scale)
        return HT.INT64 if input_type == HT.INT64 else HT.FLOAT64

    def create(self, n):
        return {"sum": np.zeros(n, dtype=np.int64), "n": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        values, groups = _non_null(values, groups)
        if values.dtype == object and not len(values):  # all null: nothing typed to add
            values = np.zeros(0, dtype=np.int64)
        return {"sum": _grouped_sum(values, groups, n), "n": _counts(groups, n)}

    def merge(self, acc, groups, n):
        return {"sum": _grouped_sum(acc["sum"], groups, n), "n": _counts(groups, n, acc["n"])}

    def extract(self, acc):
        return _nulls_where(acc["sum"], acc["n"] == 0)

    def subtract(self, acc, other):
        return {"sum": acc["sum"] - other["sum"], "n": acc["n"] - other["n"]}


class Count(CombineFn):
    """Number of elements: every row (``Count()``, SQL ``COUNT(*)``), or with
    ``skip_nulls=True`` the non-null values of the input (SQL ``COUNT(col)``).
    Never NULL: a window without such values counts 0."""

    name = "count"
    has_inverse = True

    def __init__(self, skip_nulls: bool = False) -> None:
        self.skip_nulls = bool(skip_nulls)

    def output_type(self, input_type):
        return HT.INT64

    def create(self, n):
        return {"count": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        if self.skip_nulls:
            _, groups = _non_null(values, groups)
        return {"count": _counts(groups, n)}

    def merge(self, acc, groups, n):
        return {"count": _counts(groups, n, acc["count"])}

    def extract(self, acc):
        return acc["count"]

    def subtract(self, acc, other):
        return {"count": acc["count"] - other["count"]}

    def __repr__(self) -> str:
        return "Count(skip_nulls=True)" if self.skip_nulls else "Count()"


class Mean(CombineFn):
    """Mean of the non-null inputs, as float64; NULL (NaN) for a window with none."""

    name = "mean"
    has_inverse = True

    def input_error(self, input_type):
        return _numeric_error(input_type)

    def output_type(self, input_type):
        return HT.FLOAT64

    def create(self, n):
        return {"sum": np.zeros(n, dtype=np.float64), "count": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        values, groups = _non_null(values, groups)
        v = np.asarray(values, dtype=np.float64)
        return {
            "sum": np.bincount(groups, weights=v, minlength=n),
            "count": _counts(groups, n),
        }

    def merge(self, acc, groups, n):
        return {
            "sum": np.bincount(groups, weights=acc["sum"], minlength=n),
            "count": _counts(groups, n, acc["count"]),
        }

    def extract(self, acc):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(acc["count"] > 0, acc["sum"] / np.maximum(acc["count"], 1), np.nan)

    def subtract(self, acc, other):
        return {"sum": acc["sum"] - other["sum"], "count": acc["count"] - other["count"]}


class _Extreme(CombineFn):
    """Min or max of any orderable type (ints stay exact, strings work).

    ``n`` counts the non-null inputs; a window without any is NULL: NaN in a
    numeric column (which becomes float64), None otherwise.
    """

    how = "min"

    def input_error(self, input_type):
        if input_type is None:
            return "it needs an input column"
        if not input_type.is_orderable:
            return f"it needs an orderable input (numbers, strings, times), got {input_type}"
        return None

    def output_type(self, input_type):
        return input_type if input_type is not None else HT.FLOAT64

    def create(self, n):
        return {self.how: np.zeros(n, dtype=np.int64), "n": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        values, groups = _non_null(values, groups)
        out = _grouped_extreme(values, groups, n, self.how)
        return {self.how: out, "n": np.bincount(groups, minlength=n).astype(np.int64)}

    def merge(self, acc, groups, n):
        has = acc["n"] > 0
        out = _grouped_extreme(acc[self.how][has], groups[has], n, self.how)
        return {
            self.how: out,
            "n": np.bincount(groups, weights=acc["n"], minlength=n).astype(np.int64),
        }

    def extract(self, acc):
        return _nulls_where(acc[self.how], acc["n"] == 0)


class Min(_Extreme):
    name = how = "min"


class Max(_Extreme):
    name = how = "max"


class ToList(CombineFn):
    """All values of the pane, as a list (grouping without a combiner).

    The accumulator holds each group's values as a tuple: immutable, so a merge hands
    an input's tuple on without copying it, and the interpreter's cycle collector
    stops tracking it (with lists, every full collection walked every value of every
    group a state holds). ``extract`` gives lists, as ``collect_list`` promises;
    :class:`RowValues` gives the tuples themselves.
    """

    name = "values"

    def input_error(self, input_type):
        return "it needs an input column" if input_type is None else None

    def output_type(self, input_type):
        return HT.list_of(input_type)

    def create(self, n):
        return {"values": empty_tuples(n)}

    def add(self, values, groups, n):
        """Each group's values as one tuple: slices of one tuple in sorted order, no
        per-value Python."""
        groups = np.asarray(groups)
        if not len(groups):
            return self.create(n)
        order, owners, cuts = _runs(groups)
        flat = tuple(np.asarray(values, dtype=object)[order].tolist())
        chunks = split_list(flat, np.diff(np.r_[cuts, len(flat)]))
        if len(owners) == n:  # every group has values: owners are 0..n-1
            return {"values": chunks}
        out = np.empty(n, dtype=object)
        out[owners] = chunks
        return {"values": _with_empty_tuples(out, owners)}

    def merge(self, acc, groups, n):
        """Each group's tuples concatenated in order: one element-wise ``+`` per rank
        of a tuple within its group (two for the reducer's current + new)."""
        values = acc["values"]
        if not isinstance(values, np.ndarray):  # a list of equal lists is no 2-d array
            values = object_array(values)
        out = _folded(_as_tuples(values), np.asarray(groups), empty_tuples(n), np.add)
        return {"values": out}

    def extract(self, acc):
        return _as_lists(acc["values"])

    def accumulator_to_arrow(self, field, array):
        return arrow_values.objects_to_arrow(_as_lists(array))  # a list array

    def accumulator_from_arrow(self, field, array):
        out = arrow_values.objects_from_arrow(array)
        if len(out) and not isinstance(out[0], list):  # all-empty lists come back as nulls
            out = object_array([] if v is None else v for v in out)
        return _as_tuples(out)


class RowValues(ToList):
    """:class:`ToList` whose panes hold the tuples themselves: for a reader that
    takes the values at once (the SQL general path flattens each step's groups into
    columns), which a list made per group and step would only slow."""

    def extract(self, acc):
        return acc["values"]


class TopK(CombineFn):
    """The ``k`` largest (or smallest) values, sorted."""

    name = "top"

    def input_error(self, input_type):
        return _Extreme.input_error(self, input_type)

    def output_type(self, input_type):
        return HT.list_of(input_type)

    def __init__(self, k: int, largest: bool = True) -> None:
        # a slice by k: 0 keeps nothing, -1 silently drops the smallest value
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"TopK needs a positive integer k, got {k!r}")
        self.k, self.largest = k, largest

    def _trim(self, arr: np.ndarray) -> np.ndarray:
        arr = np.sort(arr)
        return arr[::-1][: self.k] if self.largest else arr[: self.k]

    def create(self, n):
        return {"top": object_array(np.empty(0) for _ in range(n))}

    def add(self, values, groups, n):
        lists = ToList().add(values, groups, n)["values"]
        return {"top": object_array(self._trim(np.asarray(v)) for v in lists)}

    def merge(self, acc, groups, n):
        lists = ToList().merge({"values": [list(a) for a in acc["top"]]}, groups, n)["values"]
        return {"top": object_array(self._trim(np.asarray(v)) for v in lists)}

    def extract(self, acc):
        return object_array(list(a) for a in acc["top"])

    def accumulator_to_arrow(self, field, array):
        return arrow_values.ndarrays_to_arrow(array)

    def accumulator_from_arrow(self, field, array):
        return arrow_values.ndarrays_from_arrow(array)

    def __repr__(self) -> str:
        return f"TopK({self.k}, largest={self.largest})"


class CountDistinct(CombineFn):
    """Exact number of distinct non-null values (SQL ``COUNT(DISTINCT col)``); 0 for none.

    The accumulator is each window's distinct values as the keys of a Python dict
    (plain scalars, times as their integer ticks), so that a step costs its new
    values, not the values a window already holds: ``add`` makes one per group from
    one sort of the call's values, and ``merge`` updates each group's first in place
    with the others (``dict.update`` mapped over the arrays, no Python frame per
    group). A dict, not a set: the cycle collector tracks every set, and each full
    collection would walk every value held, while a dict of plain values is not
    tracked. Like every merge, it takes over its inputs: an input's dict may be the
    output's.
    """

    name = "count_distinct"

    def input_error(self, input_type):
        return "it needs an input column" if input_type is None else None

    def output_type(self, input_type):
        return HT.INT64

    def create(self, n):
        return {"distinct": _empty_value_sets(n)}

    def add(self, values, groups, n):
        values, groups = _non_null(values, groups)
        groups = np.asarray(groups)
        out = _empty_value_sets(n)
        if not len(groups):
            return {"distinct": out}
        order, owners, cuts = _runs(groups)
        flat = _plain(np.asarray(values)[order])
        out[owners] = np.fromiter(
            map(dict.fromkeys, split_list(flat, np.diff(np.r_[cuts, len(flat)]))),
            dtype=object,
            count=len(owners),
        )
        return {"distinct": out}

    def merge(self, acc, groups, n):
        held = np.asarray(acc["distinct"], dtype=object)
        out = _folded(held, np.asarray(groups), _empty_value_sets(n), _updated)
        return {"distinct": out}

    def extract(self, acc):
        sets = acc["distinct"]
        return np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))

    def accumulator_to_arrow(self, field, array):
        return arrow_values.objects_to_arrow(list(map(list, array)))  # a list array

    def accumulator_from_arrow(self, field, array):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if isinstance(array.type, arrow_values.PickledType):  # rows pickled whole
            rows = arrow_values.objects_from_arrow(array)
            sets = map(dict.fromkeys, map(_plain, rows))
            return np.fromiter(sets, dtype=object, count=len(rows))
        if pa.types.is_null(array.type):  # every window empty
            return _empty_value_sets(len(array))
        offsets = array.offsets.to_numpy()
        flat = array.values.slice(offsets[0], offsets[-1] - offsets[0])
        if pa.types.is_timestamp(flat.type) or pa.types.is_duration(flat.type):
            flat = flat.cast(pa.int64())  # an earlier state's times: their ticks, as add
        values = _plain(arrow_values.array_from_arrow(flat))
        sets = map(dict.fromkeys, split_list(values, np.diff(offsets)))
        return np.fromiter(sets, dtype=object, count=len(array))


class ApproxDistinct(CombineFn):
    """HyperLogLog distinct count (``2**precision`` registers, ~1.04/sqrt(m) error)."""

    name = "approx_distinct"

    def input_error(self, input_type):
        return "it needs an input column" if input_type is None else None

    def output_type(self, input_type):
        return HT.INT64

    def __init__(self, precision: int = 12) -> None:
        if not 4 <= precision <= 16:
            raise ValueError("ApproxDistinct precision must be between 4 and 16")
        self.p = precision
        self.m = 1 << precision

    def _registers(self, acc: Acc) -> np.ndarray:
        return np.stack(acc["hll"]) if len(acc["hll"]) else np.zeros((0, self.m), np.uint8)

    def _pack(self, regs: np.ndarray) -> Acc:
        return {"hll": object_array(regs)}

    def create(self, n):
        return self._pack(np.zeros((n, self.m), dtype=np.uint8))

    def add(self, values, groups, n):
        h = pd.util.hash_array(np.asarray(values, dtype=object)).astype(np.uint64)
        idx = (h >> np.uint64(64 - self.p)).astype(np.int64)
        rest = (h << np.uint64(self.p)) | np.uint64(1 << (self.p - 1))
        # rank = position of the leftmost 1-bit of the remaining bits
        rank = (64 - np.floor(np.log2(rest.astype(np.float64))).astype(np.int64)).astype(np.uint8)
        regs = np.zeros((n, self.m), dtype=np.uint8)
        np.maximum.at(regs, (groups, idx), rank)
        return self._pack(regs)

    def merge(self, acc, groups, n):
        regs = np.zeros((n, self.m), dtype=np.uint8)
        np.maximum.at(regs, groups, self._registers(acc))
        return self._pack(regs)

    def extract(self, acc):
        regs = self._registers(acc).astype(np.float64)
        m = self.m
        alpha = 0.7213 / (1 + 1.079 / m)
        raw = alpha * m * m / np.sum(2.0**-regs, axis=1)
        zeros = np.sum(regs == 0, axis=1)
        with np.errstate(divide="ignore"):
            linear = m * np.log(m / np.maximum(zeros, 1))
        est = np.where((raw <= 2.5 * m) & (zeros > 0), linear, raw)
        return np.round(est).astype(np.int64)

    def accumulator_to_arrow(self, field, array):
        regs = self._registers({"hll": array}).astype(np.uint8, copy=False)
        return pa.FixedSizeListArray.from_arrays(pa.array(regs.reshape(-1)), self.m)

    def accumulator_from_arrow(self, field, array):
        flat = array.flatten().to_numpy(zero_copy_only=False, writable=True)
        return self._pack(flat.reshape(len(array), self.m))["hll"]


class ApproxQuantiles(CombineFn):
    """Approximate quantiles from a mergeable compacting sample.

    Keeps at most ``capacity`` weighted items per window plus the exact minimum
    and maximum. Compaction pairs neighbours and keeps one item of each pair,
    chosen by a coin so that repeated merges do not drift. The coins are drawn
    from a hash of the items being compacted (and ``seed``), so the same inputs
    give the same sketch whatever ran before, e.g. after a restore; extraction
    returns ``num_quantiles`` values: the exact minimum, evenly spaced
    quantiles, the exact maximum.
    """

    name = "quantiles"

    def input_error(self, input_type):
        return _numeric_error(input_type)

    def output_type(self, input_type):
        return HT.list_of(HT.FLOAT64)

    def __init__(self, num_quantiles: int = 5, capacity: int = 512, seed: int = 0) -> None:
        if num_quantiles < 2:
            raise ValueError("ApproxQuantiles needs num_quantiles >= 2")
        self.q, self.capacity, self.seed = num_quantiles, capacity, seed

    def _coins(self, items: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
        """``n`` fair coins determined by the (sorted) items and weights alone."""
        digest = hashlib.blake2b(items.tobytes(), digest_size=16)
        digest.update(weights.tobytes())
        words = np.frombuffer(digest.digest(), dtype=np.uint32).tolist()
        rng = np.random.default_rng([*words, self.seed & 0xFFFFFFFF])
        return rng.integers(0, 2, n).astype(bool)

    def _sketch(self, items: np.ndarray, weights: np.ndarray, lo: float, hi: float):
        order = np.lexsort((weights, items))
        items, weights = items[order], weights[order]
        while len(items) > self.capacity:
            pairs = len(items) // 2 * 2
            pick = self._coins(items, weights, pairs // 2)
            first, second = items[0:pairs:2], items[1:pairs:2]
            kept_items = np.where(pick, second, first)
            kept_weights = weights[0:pairs:2] + weights[1:pairs:2]
            if len(items) > pairs:
                kept_items = np.r_[kept_items, items[-1:]]
                kept_weights = np.r_[kept_weights, weights[-1:]]
            items, weights = kept_items, kept_weights
        return items, weights, lo, hi

    def _empty(self):
        return (np.empty(0), np.empty(0), np.inf, -np.inf)

    def create(self, n):
        return {"sample": object_array(self._empty() for _ in range(n))}

    def add(self, values, groups, n):
        lists = ToList().add(values, groups, n)["values"]
        out = []
        for v in lists:
            arr = np.asarray(v, dtype=float)
            if len(arr) == 0:
                out.append(self._empty())
            else:
                out.append(self._sketch(arr, np.ones(len(arr)), arr.min(), arr.max()))
        return {"sample": object_array(out)}

    def merge(self, acc, groups, n):
        parts: list[list] = [[] for _ in range(n)]
        for g, sketch in zip(groups, acc["sample"], strict=True):
            parts[g].append(sketch)
        out = []
        for ps in parts:
            if not ps:
                out.append(self._empty())
                continue
            out.append(
                self._sketch(
                    np.concatenate([p[0] for p in ps]),
                    np.concatenate([p[1] for p in ps]),
                    min(p[2] for p in ps),
                    max(p[3] for p in ps),
                )
            )
        return {"sample": object_array(out)}

    def extract(self, acc):
        out = []
        for items, weights, lo, hi in acc["sample"]:
            if len(items) == 0:
                out.append([])
                continue
            cum = np.cumsum(weights) / weights.sum()
            ranks = np.linspace(0, 1, self.q)[1:-1]
            picks = np.searchsorted(cum, ranks, side="left").clip(0, len(items) - 1)
            out.append([float(lo), *items[picks].tolist(), float(hi)])
        return object_array(out)

    def accumulator_to_arrow(self, field, array):
        items = arrow_values.ndarrays_to_arrow([s[0] for s in array], pa.float64())
        weights = arrow_values.ndarrays_to_arrow([s[1] for s in array], pa.float64())
        lo = pa.array(np.array([s[2] for s in array], dtype=np.float64))
        hi = pa.array(np.array([s[3] for s in array], dtype=np.float64))
        return pa.StructArray.from_arrays(
            [items, weights, lo, hi], ["items", "weights", "lo", "hi"]
        )

    def accumulator_from_arrow(self, field, array):
        items = arrow_values.ndarrays_from_arrow(array.field("items"))
        weights = arrow_values.ndarrays_from_arrow(array.field("weights"))
        lo = array.field("lo").to_numpy(zero_copy_only=False).tolist()
        hi = array.field("hi").to_numpy(zero_copy_only=False).tolist()
        return object_array(zip(items, weights, lo, hi, strict=True))

    def __repr__(self) -> str:
        return f"ApproxQuantiles({self.q}, capacity={self.capacity})"


#: Names usable in transcripts and SQL.
COMBINERS: dict[str, type[CombineFn]] = {
    "sum": Sum,
    "count": Count,
    "mean": Mean,
    "avg": Mean,
    "min": Min,
    "max": Max,
    "list": ToList,
    "count_distinct": CountDistinct,
}
