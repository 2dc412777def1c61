"""The coverage a window needs to meet a quality requirement (the hybrid model's lambda_thr).

A user states ``P(relative error >= eps) <= delta`` for each window's result.
A window that closes with a fraction ``lambda`` of its ``N`` tuples (its
*coverage*) computes its aggregate over those only. Taking the missing tuples
as a simple random sample (without replacement) of the window's, sampling
theory gives the error's distribution as a function of ``lambda``, ``N`` and
the values' coefficient of variation ``c``; :func:`lambda_thr` is the smallest
coverage ``n / N`` that meets the requirement. The derivation is in
docs/hybrid.md ("The coverage threshold").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np


class AggregateKind(str, Enum):
    """The aggregate a requirement is stated for."""

    SUM = "sum"  # unscaled: the sum of the tuples received
    COUNT = "count"
    AVG = "avg"
    QUANTILE = "quantile"  # eps is a rank error (a fraction of the window's tuples)
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True)
class QualityRequirement:
    """``P(relative error >= eps) <= delta`` per window, for ``aggregate`` over
    windows of about ``window_tuples`` tuples whose values have coefficient of
    variation ``value_cv`` (``quantile``: which one, for QUANTILE)."""

    eps: float
    delta: float
    aggregate: AggregateKind = AggregateKind.SUM
    window_tuples: int = 1000
    value_cv: float = 1.0
    quantile: float = 0.5

    def __post_init__(self) -> None:
        if not (0 < self.eps < 1 and 0 < self.delta < 1):
            raise ValueError(
                f"a quality requirement needs 0 < eps < 1 and 0 < delta < 1, got eps={self.eps}, "
                f"delta={self.delta} (e.g. eps=0.05, delta=0.05)"
            )
        if self.window_tuples < 1 or self.value_cv < 0:
            raise ValueError(
                f"window_tuples must be >= 1 and value_cv >= 0, got {self.window_tuples} and "
                f"{self.value_cv}: estimate them from a sample of the stream"
            )
        object.__setattr__(self, "aggregate", AggregateKind(self.aggregate))


def violation_probability(req: QualityRequirement, received: np.ndarray) -> np.ndarray:
    """``P(relative error >= eps)`` when ``received`` of the window's tuples arrived in
    time (normal approximation of the sampling distribution; vectorized)."""
    big_n = req.window_tuples
    n = np.asarray(received, dtype=np.float64)
    lam = n / big_n
    fpc = (big_n - n) / max(big_n - 1, 1)  # finite-population correction
    kind = req.aggregate
    if kind in (AggregateKind.SUM, AggregateKind.COUNT):
        c = req.value_cv if kind == AggregateKind.SUM else 0.0
        # error = (m/N) * mean(missing)/mean(all), m = N - n missing tuples
        mean = 1 - lam
        sd = c * np.sqrt((big_n - n) * n / max(big_n - 1, 1)) / big_n
        return _upper_tail(mean, sd, req.eps)
    if kind == AggregateKind.AVG:
        sd = req.value_cv * np.sqrt(fpc / np.maximum(n, 1))
        return np.where(n > 0, 2 * _upper_tail(0.0, sd, req.eps), 1.0)
    if kind == AggregateKind.QUANTILE:
        q = req.quantile
        sd = np.sqrt(q * (1 - q) * fpc / np.maximum(n, 1))
        return np.where(n > 0, 2 * _upper_tail(0.0, sd, req.eps), 1.0)
    # MIN / MAX: see lambda_thr
    return np.where(n >= big_n, 0.0, 1.0)


def _upper_tail(mean, sd, eps: float) -> np.ndarray:
    """P(X >= eps) for X ~ Normal(mean, sd); a point mass when sd is 0."""
    mean, sd = np.broadcast_arrays(np.asarray(mean, float), np.asarray(sd, float))
    z = (eps - mean) / np.where(sd > 0, sd, 1.0)
    normal = 0.5 * _erfc(z / math.sqrt(2))
    return np.where(sd > 0, normal, (mean >= eps).astype(float))


def lambda_thr(req: QualityRequirement) -> float:
    """The smallest coverage ``n / N`` whose violation probability is at most ``delta``.

    MIN and MAX need full coverage: a missed extreme's error has no bound, so
    no coverage short of 1 bounds P(error >= eps) without assuming the data.
    """
    if req.aggregate in (AggregateKind.MIN, AggregateKind.MAX):
        return 1.0
    received = np.arange(req.window_tuples + 1)
    too_few = np.flatnonzero(violation_probability(req, received) > req.delta)
    return float((too_few.max() + 1) / req.window_tuples)


def coefficient_of_variation(values: np.ndarray) -> float:
    """std / |mean| of a sample (0 for constant values); for estimating ``value_cv``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if len(v) < 2 or v.mean() == 0:
        return 0.0
    return float(v.std(ddof=1) / abs(v.mean()))


_erfc = np.vectorize(math.erfc, otypes=[np.float64])
