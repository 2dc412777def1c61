"""K-slack watermarks: the buffer of the hybrid processing model as watermark strategies.

A K-slack buffer holds a tuple until the largest event time its shard has seen
(``t_max``) is ``K`` past it; in the model's terms the watermark is
``t_max - K`` and a window closes when its end is at or before it. Tuples that
arrive behind the watermark go to the windows still open; those behind every
window holding them are dead letters (docs/hybrid.md, "Routing"). The
strategies differ in how ``K`` is chosen:

* :class:`FixedSlack`: a constant ``K``;
* :class:`MaxDelaySlack` (MP-K-slack): ``K`` = the largest delay seen so far;
* :class:`QualityDriven` (AQ-K-slack, and HPM's stream module): ``K = alpha * k``
  (``k`` the largest delay seen), ``alpha`` set after each window by a PD
  controller that holds the windows' coverage at :func:`~headwater.model.quality.lambda_thr`.

The watermark of a shard is computed per micro-batch from the event times in
arrival order (:func:`slack_trace`): every runner calls it for every shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwater.model.quality import QualityRequirement, lambda_thr
from headwater.model.time import MIN_TIMESTAMP
from headwater.model.watermarks import WatermarkStrategy


class SlackStrategy(WatermarkStrategy):
    """Base of K-slack strategies: the watermark is ``t_max - K`` per shard."""


@dataclass(frozen=True)
class FixedSlack(SlackStrategy):
    """``K`` fixed at ``slack`` ms."""

    slack: int

    def __post_init__(self) -> None:
        if self.slack < 0:
            raise ValueError(f"a K-slack buffer cannot be negative, got {self.slack} ms")

    def describe(self) -> str:
        return f"K-slack of {self.slack} ms"


@dataclass(frozen=True)
class MaxDelaySlack(SlackStrategy):
    """MP-K-slack: ``K`` is the largest delay seen so far (it never shrinks)."""

    def describe(self) -> str:
        return "MP-K-slack (K = largest delay seen)"


@dataclass(frozen=True)
class QualityDriven(SlackStrategy):
    """``K = alpha * k``, ``alpha`` steered by a PD controller towards coverage ``lambda_thr``.

    ``size``/``period``: the windows (ms) whose coverage is measured (those of the
    query). A window's coverage is final once the watermark is ``follow_up`` ms
    past its end: the tuples that arrived for it by then, late or not, are its
    whole. ``alpha`` starts at ``alpha0`` and stays within [0, 1] (``K`` never
    exceeds the largest delay seen).
    """

    requirement: QualityRequirement
    size: int
    period: int
    kp: float = 0.2
    kd: float = 4.0
    follow_up: int = 1000
    alpha0: float = 1.0

    def __post_init__(self) -> None:
        if self.size <= 0 or self.period <= 0 or self.follow_up < 0:
            raise ValueError(
                f"QualityDriven needs windows of positive size and period and a follow-up >= 0, "
                f"got size={self.size}, period={self.period}, follow_up={self.follow_up} (ms)"
            )

    @property
    def lambda_thr(self) -> float:
        return lambda_thr(self.requirement)

    def describe(self) -> str:
        r = self.requirement
        return (
            f"quality-driven K-slack (eps={r.eps}, delta={r.delta}, lambda_thr={self.lambda_thr})"
        )


@dataclass(frozen=True)
class SlackTrace:
    """One shard's K-slack over its micro-batches: the watermark after each batch and
    the ``K`` (ms) it was computed with; for :class:`QualityDriven` also each measured
    window's coverage (in the order measured) and ``alpha`` after each batch."""

    watermarks: np.ndarray
    slack: np.ndarray
    alpha: np.ndarray | None = None
    coverage: np.ndarray | None = None


def delays(ts: np.ndarray) -> np.ndarray:
    """Each tuple's delay (ms): the largest event time before it minus its own, >= 0."""
    ts = np.asarray(ts, dtype=np.int64)
    before = np.full(len(ts), MIN_TIMESTAMP, dtype=np.int64)
    before[1:] = np.maximum.accumulate(ts)[:-1]
    return np.maximum(before - ts, 0) if len(ts) else ts


def slack_trace(strategy: SlackStrategy, ts: np.ndarray, batches: list[np.ndarray]) -> SlackTrace:
    """The watermark after each micro-batch of a shard. ``ts``: event times (ms);
    ``batches``: the positions in ``ts`` of each batch's rows, in arrival order."""
    if isinstance(strategy, QualityDriven):
        return _quality_driven(strategy, ts, batches)
    ts = np.asarray(ts, dtype=np.int64)
    order = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
    ends = np.cumsum([len(b) for b in batches]) - 1
    t_max = np.maximum.accumulate(ts[order])[ends]
    if isinstance(strategy, FixedSlack):
        slack = np.full(len(batches), strategy.slack, dtype=np.int64)
    else:
        slack = np.maximum.accumulate(delays(ts[order]))[ends]
    return SlackTrace(np.maximum.accumulate(t_max - slack), slack)


def _quality_driven(s: QualityDriven, ts: np.ndarray, batches: list[np.ndarray]) -> SlackTrace:
    """The PD-controlled K-slack: one pass over the batches (vectorized within a batch),
    one controller update per window whose follow-up has ended."""
    ts = np.asarray(ts, dtype=np.int64)
    n = len(batches)
    watermarks, slack = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    alphas = np.zeros(n)
    if not n:
        return SlackTrace(watermarks, slack, alphas, np.zeros(0))
    order = np.concatenate(batches)
    starts = np.r_[0, np.cumsum([len(b) for b in batches])[:-1]]
    batch_t_max = np.maximum.accumulate(np.maximum.reduceat(ts[order], starts))
    batch_k = np.maximum.accumulate(np.maximum.reduceat(delays(ts[order]), starts))
    counts = _WindowCounts(s, int(ts.min()), int(ts.max()))
    pd = _PD(s.kp, s.kd, s.lambda_thr, s.alpha0)
    wm, measured = MIN_TIMESTAMP, []
    for b, rows in enumerate(batches):
        counts.add(ts[rows], wm)
        slack[b] = round(pd.alpha * batch_k[b])
        wm = max(wm, int(batch_t_max[b] - slack[b]))
        watermarks[b] = wm
        for coverage in counts.finished(wm):
            pd.update(coverage)
            measured.append(coverage)
        alphas[b] = pd.alpha
    return SlackTrace(watermarks, slack, alphas, np.asarray(measured))


class _WindowCounts:
    """Per window of the strategy: tuples received before it closed, and after (late)
    but within its follow-up."""

    def __init__(self, s: QualityDriven, t_min: int, t_max: int) -> None:
        self.size, self.period, self.follow_up = s.size, s.period, s.follow_up
        self.first = (t_min - s.size) // s.period
        count = t_max // s.period - self.first + 1
        self.received = np.zeros(count, dtype=np.int64)
        self.late = np.zeros(count, dtype=np.int64)
        self.next = 0  # the next window to measure

    def add(self, ts: np.ndarray, watermark: int) -> None:
        last = ts - ts % self.period
        for o in range(-(-self.size // self.period)):
            start = last - o * self.period
            end = start + self.size
            inside = end > ts
            on_time = inside & (end > watermark)
            late = inside & ~on_time & (end + self.follow_up > watermark)
            np.add.at(self.received, start[on_time] // self.period - self.first, 1)
            np.add.at(self.late, start[late] // self.period - self.first, 1)

    def finished(self, watermark: int) -> list[float]:
        """Coverage of each window whose follow-up ended by ``watermark`` (empty ones skipped)."""
        out = []
        while self.next < len(self.received):
            end = (self.first + self.next) * self.period + self.size
            if end + self.follow_up > watermark:
                break
            got, late = self.received[self.next], self.late[self.next]
            if got + late:
                out.append(float(got / (got + late)))
            self.next += 1
        return out


class _PD:
    """alpha <- alpha + kp * err(i) + kd * (err(i) - err(i-1)), err = lambda_thr - lambda_i,
    alpha kept in [0, 1]."""

    def __init__(self, kp: float, kd: float, target: float, alpha0: float) -> None:
        self.kp, self.kd, self.target = kp, kd, target
        self.alpha, self.err = float(np.clip(alpha0, 0, 1)), 0.0

    def update(self, coverage: float) -> None:
        err = self.target - coverage
        step = self.kp * err + self.kd * (err - self.err)
        self.alpha = float(np.clip(self.alpha + step, 0.0, 1.0))
        self.err = err
