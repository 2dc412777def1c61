"""lambda_thr: the coverage a window needs, checked by simulating windows."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.model.quality import (
    AggregateKind,
    QualityRequirement,
    coefficient_of_variation,
    lambda_thr,
)

WINDOWS = 20_000  # simulated windows per check


def _violation_rate(req: QualityRequirement, received: int, seed: int = 0) -> float:
    """Windows of gamma values (CV = req.value_cv) of which a random ``N - received``
    are missing: the fraction whose aggregate over the rest is off by >= eps."""
    rng = np.random.default_rng(seed)
    n = req.window_tuples
    shape = 1 / req.value_cv**2
    values = rng.gamma(shape, 1 / shape, size=(WINDOWS, n))
    kept = np.argsort(rng.random((WINDOWS, n)), axis=1) < received
    got = np.where(kept, values, 0.0)
    kind = req.aggregate
    if kind == AggregateKind.SUM:
        err = 1 - got.sum(1) / values.sum(1)
    elif kind == AggregateKind.COUNT:
        err = np.full(WINDOWS, 1 - received / n)
    elif kind == AggregateKind.AVG:
        err = np.abs(got.sum(1) / received / values.mean(1) - 1)
    else:  # the received median's rank among all the window's values
        med = np.array([np.quantile(v[k], req.quantile) for v, k in zip(values, kept, strict=True)])
        err = np.abs((values < med[:, None]).mean(1) - req.quantile)
    return float((err >= req.eps - 1e-12).mean())


@pytest.mark.parametrize(
    ("aggregate", "n", "cv"),
    [("sum", 100, 0.82), ("sum", 400, 1.5), ("count", 100, 0.82), ("avg", 50, 0.82)],
)
def test_threshold_meets_the_requirement_and_is_tight(aggregate, n, cv):
    req = QualityRequirement(0.05, 0.05, aggregate, window_tuples=n, value_cv=cv)
    thr = lambda_thr(req)
    received = round(thr * n)
    assert _violation_rate(req, received) <= req.delta + 0.01  # 0.01: Monte Carlo error
    fewer = received - max(2, n // 100)  # a few tuples fewer breaks it
    assert _violation_rate(req, fewer) > req.delta


def test_quantile_threshold_in_rank_error():
    req = QualityRequirement(0.1, 0.05, "quantile", window_tuples=60, value_cv=1.0)
    received = round(lambda_thr(req) * 60)
    assert _violation_rate(req, received) <= req.delta + 0.02


def test_sum_and_count_sit_just_above_one_minus_eps_for_large_windows():
    for kind in ("sum", "count"):
        thr = lambda_thr(QualityRequirement(0.05, 0.05, kind, window_tuples=100_000))
        assert 0.95 < thr < 0.952


def test_min_max_need_full_coverage():
    for kind in ("min", "max"):
        assert lambda_thr(QualityRequirement(0.05, 0.05, kind, window_tuples=10_000)) == 1.0


def test_requirement_errors_say_how_to_fix():
    with pytest.raises(ValueError, match="e.g. eps=0.05"):
        QualityRequirement(0.0, 0.05)
    with pytest.raises(ValueError, match="estimate them from a sample"):
        QualityRequirement(0.05, 0.05, window_tuples=0)


def test_coefficient_of_variation():
    assert coefficient_of_variation(np.array([2.0, 2.0, 2.0])) == 0.0
    assert coefficient_of_variation(np.array([1.0, 3.0])) == pytest.approx(np.sqrt(2) / 2)
