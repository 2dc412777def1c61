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

import json
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


@dataclass(frozen=True)
class SlackStep:
    """What one micro-batch did to a shard's K-slack: the watermark after it, the ``K``
    (ms) it was computed with, and for :class:`QualityDriven` ``alpha`` after the batch
    and the coverage of each window measured in it."""

    watermark: int
    slack: int
    alpha: float | None = None
    coverage: tuple[float, ...] = ()


class SlackTracker:
    """One shard's K-slack, advanced micro-batch by micro-batch (:meth:`advance`).

    It keeps ``t_max``, the largest delay ``k`` and the watermark; its state
    round-trips through :meth:`snapshot` / :func:`slack_tracker` (a small JSON
    document), so a runner can keep it in a state store between micro-batches.
    """

    def __init__(self, strategy: SlackStrategy, state: dict | None = None) -> None:
        state = state or {}
        self.strategy = strategy
        self.t_max = int(state.get("t_max", MIN_TIMESTAMP))
        self.k = int(state.get("k", 0))
        self.watermark = int(state.get("watermark", MIN_TIMESTAMP))

    def slack(self) -> int:
        raise NotImplementedError

    def advance(self, ts: np.ndarray) -> SlackStep:
        """The rows of one micro-batch (event times in arrival order) have arrived."""
        self._observe(np.asarray(ts, dtype=np.int64))
        return self._close()

    def _observe(self, ts: np.ndarray) -> None:
        if len(ts):
            seen = np.maximum.accumulate(np.r_[self.t_max, ts])
            self.k = max(self.k, int(np.max(seen[:-1] - ts, initial=0)))
            self.t_max = int(seen[-1])

    def _close(self) -> SlackStep:
        slack = self.slack()
        if self.t_max > MIN_TIMESTAMP:
            self.watermark = max(self.watermark, self.t_max - slack)
        return SlackStep(self.watermark, slack)

    def state(self) -> dict:
        return {"t_max": self.t_max, "k": self.k, "watermark": self.watermark}

    def snapshot(self) -> bytes:
        return json.dumps({"version": _SNAPSHOT_VERSION, **self.state()}).encode()


_SNAPSHOT_VERSION = 1


class _FixedTracker(SlackTracker):
    def slack(self) -> int:
        return self.strategy.slack


class _MaxDelayTracker(SlackTracker):
    def slack(self) -> int:
        return self.k


class _QualityTracker(SlackTracker):
    """``K = round(alpha * k)``; after each batch, one controller update per window
    whose follow-up has ended."""

    def __init__(self, strategy: QualityDriven, state: dict | None = None) -> None:
        super().__init__(strategy, state)
        state = state or {}
        self.counts = _WindowCounts(strategy, state.get("counts"))
        self.pd = SlackController(strategy.kp, strategy.kd, strategy.lambda_thr, strategy.alpha0)
        self.pd.alpha = float(state.get("alpha", self.pd.alpha))
        self.pd.err = float(state.get("err", 0.0))

    def slack(self) -> int:
        return round(self.pd.alpha * self.k)

    def advance(self, ts: np.ndarray) -> SlackStep:
        ts = np.asarray(ts, dtype=np.int64)
        self.counts.add(ts, self.watermark)  # judged against the watermark at arrival
        self._observe(ts)
        step = self._close()
        measured = self.counts.finished(self.watermark)
        for coverage in measured:
            self.pd.update(coverage)
        return SlackStep(step.watermark, step.slack, self.pd.alpha, tuple(measured))

    def state(self) -> dict:
        extra = {"alpha": self.pd.alpha, "err": self.pd.err, "counts": self.counts.state()}
        return {**super().state(), **extra}


#: The tracker of each K-slack strategy, by class.
TRACKERS: dict[type[SlackStrategy], type[SlackTracker]] = {
    FixedSlack: _FixedTracker,
    MaxDelaySlack: _MaxDelayTracker,
    QualityDriven: _QualityTracker,
}


def slack_tracker(strategy: SlackStrategy, snapshot: bytes | None = None) -> SlackTracker:
    """A shard's tracker for ``strategy``, fresh or restored from a :meth:`snapshot`."""
    state = None
    if snapshot is not None:
        state = json.loads(snapshot)
        if state.get("version") != _SNAPSHOT_VERSION:
            raise ValueError(
                f"a K-slack snapshot of version {state.get('version')!r}; this headwater reads "
                f"version {_SNAPSHOT_VERSION}: restart the query from a new checkpoint"
            )
    return TRACKERS[type(strategy)](strategy, state)


def slack_trace(strategy: SlackStrategy, ts: np.ndarray, batches: list[np.ndarray]) -> SlackTrace:
    """The watermark after each micro-batch of a shard. ``ts``: event times (ms);
    ``batches``: the positions in ``ts`` of each batch's rows, in arrival order."""
    ts = np.asarray(ts, dtype=np.int64)
    tracker = slack_tracker(strategy)
    steps = [tracker.advance(ts[rows]) for rows in batches]
    watermarks = np.array([s.watermark for s in steps], dtype=np.int64)
    slack = np.array([s.slack for s in steps], dtype=np.int64)
    if not isinstance(tracker, _QualityTracker):
        return SlackTrace(watermarks, slack)
    alpha = np.array([s.alpha for s in steps], dtype=np.float64)
    coverage = np.array([c for s in steps for c in s.coverage], dtype=np.float64)
    return SlackTrace(watermarks, slack, alpha, coverage)


class _WindowCounts:
    """Per window of the strategy not yet measured: tuples received before it closed,
    and after (late) but within its follow-up.

    The arrays cover windows ``base, base + 1, ...`` (window ``i`` starts at
    ``i * period``). Every window a tuple can still count for starts at or after
    the first one not yet measured (its end plus the follow-up is past the
    watermark), so measured windows are dropped from the front.
    """

    def __init__(self, s: QualityDriven, state: dict | None = None) -> None:
        self.size, self.period, self.follow_up = s.size, s.period, s.follow_up
        state = state or {}
        self.base: int | None = state.get("base")
        self.received = np.asarray(state.get("received", []), dtype=np.int64)
        self.late = np.asarray(state.get("late", []), dtype=np.int64)

    def state(self) -> dict:
        return {"base": self.base, "received": self.received.tolist(), "late": self.late.tolist()}

    def add(self, ts: np.ndarray, watermark: int) -> None:
        last = ts - ts % self.period
        on_time, late = [], []
        for o in range(-(-self.size // self.period)):
            start = last - o * self.period
            end = start + self.size
            inside = end > ts
            now = inside & (end > watermark)
            on_time.append(start[now] // self.period)
            late.append(start[inside & ~now & (end + self.follow_up > watermark)] // self.period)
        got, missed = np.concatenate(on_time), np.concatenate(late)
        both = np.r_[got, missed]
        if not len(both):
            return
        self._cover(int(both.min()), int(both.max()))
        np.add.at(self.received, got - self.base, 1)
        np.add.at(self.late, missed - self.base, 1)

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the arrays to hold windows ``lo..hi``."""
        if self.base is None:
            self.base = lo
        before = max(self.base - lo, 0)
        after = max(hi - (self.base + len(self.received) - 1), 0)
        if before or after:
            self.received = np.pad(self.received, (before, after))
            self.late = np.pad(self.late, (before, after))
            self.base -= before

    def finished(self, watermark: int) -> list[float]:
        """Coverage of each window whose follow-up ended by ``watermark`` (empty ones
        skipped), in window order; those windows are dropped."""
        if self.base is None:
            return []
        bound = (watermark - self.size - self.follow_up) // self.period + 1  # first still open
        done = int(np.clip(bound - self.base, 0, len(self.received)))
        got, late = self.received[:done], self.late[:done]
        total = got + late
        keep = total > 0
        out = (got[keep] / total[keep]).astype(np.float64).tolist()
        if done:
            self.received, self.late = self.received[done:], self.late[done:]
            self.base += done
        return out


class SlackController:
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
