"""What is computed: combiners in the create / add / merge / extract style.

Accumulators are columns (dicts of numpy arrays, one row per window), so a
bundle is folded into its windows with grouped numpy operations:

* ``add(values, groups, n)``: accumulators of ``n`` groups from raw values;
* ``merge(acc, groups, n)``: fold accumulator rows into ``n`` groups;
* ``extract(acc)``: the output column.

A user combiner may implement only the scalar methods (``create_accumulator``,
``add_input``, ``merge_accumulators``, ``extract_output``, as in Beam); the
base class then runs them once per group (a documented slow path). A combiner
with an inverse (``subtract``) lets consumers apply retractions cheaply.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

Acc = dict[str, np.ndarray]


def object_array(items) -> np.ndarray:
    """A 1-d object array of ``items`` (numpy would otherwise nest lists)."""
    items = list(items)
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
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
    """Per-group sums keeping integer types; groups without input sum to 0."""
    values = np.asarray(values)
    if values.dtype.kind in "iub":
        out = np.zeros(n, dtype=np.int64)
        np.add.at(out, groups, values)
        return out
    if values.dtype.kind == "f":
        return np.bincount(groups, weights=values, minlength=n)
    out = pd.Series(values).groupby(groups).sum()
    return out.reindex(range(n), fill_value=0).to_numpy()


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
    result = getattr(pd.Series(values, dtype=object).groupby(groups), how)()
    out = np.empty(n, dtype=object)
    out[result.index.to_numpy()] = result.to_numpy()
    return out


class CombineFn:
    """Base combiner. Override the vectorized methods, or the scalar ones."""

    #: Name of the output when a pane carries a single aggregation.
    name = "combine"
    #: Whether :meth:`subtract` is implemented (an inverse, for retractions).
    has_inverse = False

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Sum(CombineFn):
    """Sum of the non-null inputs (0 for none)."""

    name = "sum"
    has_inverse = True

    def create(self, n):
        return {"sum": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        return {"sum": _grouped_sum(*_non_null(values, groups), n)}

    def merge(self, acc, groups, n):
        return {"sum": _grouped_sum(acc["sum"], groups, n)}

    def extract(self, acc):
        return acc["sum"]

    def subtract(self, acc, other):
        return {"sum": acc["sum"] - other["sum"]}


class Count(CombineFn):
    """Number of elements (values are ignored; nulls count too)."""

    name = "count"
    has_inverse = True

    def create(self, n):
        return {"count": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        return {"count": np.bincount(groups, minlength=n).astype(np.int64)}

    def merge(self, acc, groups, n):
        return {"count": np.bincount(groups, weights=acc["count"], minlength=n).astype(np.int64)}

    def extract(self, acc):
        return acc["count"]

    def subtract(self, acc, other):
        return {"count": acc["count"] - other["count"]}


class Mean(CombineFn):
    """Mean of the non-null inputs (NaN for none)."""

    name = "mean"
    has_inverse = True

    def create(self, n):
        return {"sum": np.zeros(n, dtype=np.float64), "count": np.zeros(n, dtype=np.int64)}

    def add(self, values, groups, n):
        values, groups = _non_null(values, groups)
        v = np.asarray(values, dtype=np.float64)
        return {
            "sum": np.bincount(groups, weights=v, minlength=n),
            "count": np.bincount(groups, minlength=n).astype(np.int64),
        }

    def merge(self, acc, groups, n):
        return {
            "sum": np.bincount(groups, weights=acc["sum"], minlength=n),
            "count": np.bincount(groups, weights=acc["count"], minlength=n).astype(np.int64),
        }

    def extract(self, acc):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(acc["count"] > 0, acc["sum"] / np.maximum(acc["count"], 1), np.nan)

    def subtract(self, acc, other):
        return {"sum": acc["sum"] - other["sum"], "count": acc["count"] - other["count"]}


class _Extreme(CombineFn):
    """Min or max of any orderable type (ints stay exact, strings work).

    ``n`` counts the inputs; empty accumulators extract as NaN (numbers) or None.
    """

    how = "min"

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
        out, empty = acc[self.how], acc["n"] == 0
        if not empty.any():
            return out
        if out.dtype.kind in "iuf":
            out = out.astype(np.float64)
            out[empty] = np.nan
            return out
        out = out.astype(object)
        out[empty] = None
        return out


class Min(_Extreme):
    name = how = "min"


class Max(_Extreme):
    name = how = "max"


class ToList(CombineFn):
    """All values of the pane, as a list (grouping without a combiner)."""

    name = "values"

    def create(self, n):
        return {"values": object_array([] for _ in range(n))}

    def add(self, values, groups, n):
        out = self.create(n)["values"]
        if len(groups):
            order = np.argsort(groups, kind="stable")
            sorted_groups = groups[order]
            sorted_values = np.asarray(values, dtype=object)[order]
            cuts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
            for g, chunk in zip(
                sorted_groups[cuts], np.split(sorted_values, cuts[1:]), strict=True
            ):
                out[g] = list(chunk)
        return {"values": out}

    def merge(self, acc, groups, n):
        out = self.create(n)["values"]
        for g, lst in zip(groups, acc["values"], strict=True):
            out[g] = out[g] + lst
        return {"values": out}

    def extract(self, acc):
        return acc["values"]


class TopK(CombineFn):
    """The ``k`` largest (or smallest) values, sorted."""

    name = "top"

    def __init__(self, k: int, largest: bool = True) -> None:
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

    def __repr__(self) -> str:
        return f"TopK({self.k}, largest={self.largest})"


class ApproxDistinct(CombineFn):
    """HyperLogLog distinct count (``2**precision`` registers, ~1.04/sqrt(m) error)."""

    name = "approx_distinct"

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


class ApproxQuantiles(CombineFn):
    """Approximate quantiles from a mergeable compacting sample.

    Keeps at most ``capacity`` weighted items per window plus the exact minimum
    and maximum. Compaction pairs neighbours and keeps one item of each pair,
    chosen by a seeded coin so that repeated merges do not drift; extraction
    returns ``num_quantiles`` values: the exact minimum, evenly spaced
    quantiles, the exact maximum.
    """

    name = "quantiles"

    def __init__(self, num_quantiles: int = 5, capacity: int = 512, seed: int = 0) -> None:
        if num_quantiles < 2:
            raise ValueError("ApproxQuantiles needs num_quantiles >= 2")
        self.q, self.capacity = num_quantiles, capacity
        self._rng = np.random.default_rng(seed)

    def _sketch(self, items: np.ndarray, weights: np.ndarray, lo: float, hi: float):
        order = np.argsort(items, kind="stable")
        items, weights = items[order], weights[order]
        while len(items) > self.capacity:
            pairs = len(items) // 2 * 2
            pick = self._rng.integers(0, 2, pairs // 2).astype(bool)
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
}
