"""Reproducible out-of-order sensor streams, and a reader for a user's own.

A stream is a pandas DataFrame in **arrival order** with the columns
``sensor`` (int), ``ts`` (event time, int64 ms), ``arrival`` (processing time,
int64 ms) and ``speed`` (int64 mm/s, the value the experiment sums).

Definitions (docs/hybrid.md, "Data"): the **delay** of a tuple is the largest
event time seen before it in arrival order minus its own event time, clipped
at 0; a tuple is **late** when its delay is positive. Both are computed by
:func:`stream_stats`, vectorized.

The generator models the DEBS 2013 soccer RTLS streams the paper used: several
sensors sampling at a fixed rate, each reading sent over a network with light
exponential jitter, a small fraction of readings held back by a heavy
(truncated Pareto) tail, and one reading delayed by exactly the profile's
maximum delay. The two profiles' jitter and tail parameters were found with
:func:`calibrate` (``python -m headwater.hybrid.generator --calibrate game1``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from headwater.model.slack import delays

#: The columns of a stream, in order.
COLUMNS = ("sensor", "ts", "arrival", "speed")


@dataclass(frozen=True)
class Profile:
    """What a generated stream looks like; ``target_*`` are the statistics it must show."""

    name: str
    events: int
    target_late: float  # fraction of late tuples
    target_mean_delay_ms: float
    max_delay_ms: int
    sensors: int = 16
    rate_hz: int = 200
    jitter_ms: float = 10.0  # mean of the exponential network jitter
    tail_fraction: float = 0.005  # readings held back by the heavy tail
    tail_min_ms: float = 200.0  # the tail's Pareto scale
    tail_shape: float = 1.2  # the tail's Pareto shape (smaller: heavier)


#: The two soccer games of the paper (DEBS 2013 Grand Challenge), calibrated.
PROFILES: dict[str, Profile] = {
    "game1": Profile(
        "game1", 544_223, 0.5758, 34.0, 14_200, jitter_ms=4.038, tail_fraction=0.04675
    ),
    "game2": Profile(
        "game2", 559_211, 0.6682, 64.0, 17_100, jitter_ms=6.094, tail_fraction=0.08733
    ),
}


@dataclass(frozen=True)
class StreamStats:
    """Statistics of a stream in arrival order (see the module docstring)."""

    tuples: int
    late_fraction: float
    mean_delay_ms: float
    max_delay_ms: int


def profile(name: str) -> Profile:
    """A profile by name; the error lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown stream profile {name!r}: choose one of {sorted(PROFILES)}, or read your "
            "own file with headwater.hybrid.generator.read_stream"
        ) from None


def generate(p: Profile, *, seed: int = 0, events: int | None = None) -> pd.DataFrame:
    """A stream of ``events`` tuples (default: the profile's), in arrival order."""
    n = int(p.events if events is None else events)
    rng = np.random.default_rng(seed)
    period = 1000.0 / p.rate_hz
    seq = np.arange(n)
    sensor = seq % p.sensors
    phase = np.arange(p.sensors) * period / p.sensors  # staggered sampling
    ts = np.floor((seq // p.sensors) * period + phase[sensor]).astype(np.int64)
    latency = rng.exponential(p.jitter_ms, n)
    tail = rng.random(n) < p.tail_fraction
    latency[tail] += _truncated_pareto(rng, int(tail.sum()), p)
    arrival = ts + np.rint(latency).astype(np.int64)
    arrival = _force_max_delay(rng, ts, arrival, p.max_delay_ms)
    # mm/s, mean 2 m/s, CV 0.82; integers, so that sums are exact in any order
    speed = np.rint(rng.gamma(shape=1.5, scale=2000 / 1.5, size=n)).astype(np.int64)
    order = np.lexsort((seq, arrival))
    return pd.DataFrame(
        {
            "sensor": sensor[order].astype(np.int64),
            "ts": ts[order],
            "arrival": arrival[order],
            "speed": speed[order],
        }
    )


def _truncated_pareto(rng: np.random.Generator, n: int, p: Profile) -> np.ndarray:
    """Pareto(scale, shape) delays below 90% of the maximum delay (inverse CDF)."""
    top = 0.9 * p.max_delay_ms
    cdf_top = 1 - (p.tail_min_ms / top) ** p.tail_shape
    u = rng.uniform(0, cdf_top, n)
    return p.tail_min_ms * (1 - u) ** (-1 / p.tail_shape)


def _force_max_delay(
    rng: np.random.Generator, ts: np.ndarray, arrival: np.ndarray, max_delay: int
) -> np.ndarray:
    """Hold one reading back until the stream has passed its event time by ``max_delay``."""
    order = np.argsort(arrival, kind="stable")
    seen = np.maximum.accumulate(ts[order])
    candidates = np.flatnonzero(ts + max_delay < seen[-1])
    if not len(candidates):
        return arrival
    victim = candidates[rng.integers(len(candidates) // 4, len(candidates))]
    after = np.searchsorted(seen, ts[victim] + max_delay)  # first arrival that far ahead
    out = arrival.copy()
    out[victim] = arrival[order[after]] + 1
    return out


def stream_stats(stream: pd.DataFrame) -> StreamStats:
    """Late fraction, mean and maximum delay of a stream in arrival order."""
    d = delays(stream["ts"].to_numpy())
    if not len(d):
        return StreamStats(0, 0.0, 0.0, 0)
    return StreamStats(len(d), float((d > 0).mean()), float(d.mean()), int(d.max()))


def read_stream(
    path: str | Path,
    *,
    event_time: str = "ts",
    arrival: str = "arrival",
    key: str = "sensor",
    value: str = "speed",
    arrival_is_order: bool = False,
) -> pd.DataFrame:
    """A user's stream from CSV or Parquet, in the generator's columns.

    ``event_time`` and ``arrival``: epoch ms or timestamps. With
    ``arrival_is_order`` the arrival column is only a position; processing
    time is then taken as the largest event time seen up to that position.
    """
    path = Path(path)
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    missing = [c for c in (event_time, arrival, key, value) if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: no column(s) {missing} (columns: {list(frame.columns)}); name them with "
            "event_time=, arrival=, key= and value= (CLI: --event-time, --arrival, --key, --value)"
        )
    frame = frame.sort_values(arrival, kind="stable").reset_index(drop=True)
    ts = _as_millis(frame[event_time])
    clock = np.maximum.accumulate(ts) if arrival_is_order else _as_millis(frame[arrival])
    return pd.DataFrame(
        {
            "sensor": _key_codes(frame[key]),
            "ts": ts,
            "arrival": clock,
            "speed": frame[value].to_numpy(),
        }
    )


def _key_codes(column: pd.Series) -> np.ndarray:
    """Integer keys as they are (shards split them by value); others as codes."""
    if pd.api.types.is_integer_dtype(column):
        return column.to_numpy(np.int64)
    return pd.factorize(column)[0].astype(np.int64)


def _as_millis(column: pd.Series) -> np.ndarray:
    if pd.api.types.is_datetime64_any_dtype(column):
        return column.to_numpy().astype("datetime64[ms]").astype(np.int64)
    return pd.to_numeric(column).to_numpy(np.int64)


def calibrate(p: Profile, *, seed: int = 0, rounds: int = 12) -> Profile:
    """Jitter and tail fraction that give the profile's late fraction and mean delay
    (bisection on each in turn: jitter sets lateness, the tail the mean delay)."""
    for _ in range(3):
        lo, hi = 0.1, 100.0
        for _ in range(rounds):
            p = replace(p, jitter_ms=(lo * hi) ** 0.5)
            late = stream_stats(generate(p, seed=seed)).late_fraction
            lo, hi = (p.jitter_ms, hi) if late < p.target_late else (lo, p.jitter_ms)
        lo, hi = 0.0, 0.1
        for _ in range(rounds):
            p = replace(p, tail_fraction=(lo + hi) / 2)
            mean = stream_stats(generate(p, seed=seed)).mean_delay_ms
            below = mean < p.target_mean_delay_ms
            lo, hi = (p.tail_fraction, hi) if below else (lo, p.tail_fraction)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="calibrate a stream profile's parameters")
    parser.add_argument("--calibrate", choices=sorted(PROFILES), required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    found = calibrate(PROFILES[args.calibrate], seed=args.seed)
    print(f"jitter_ms={found.jitter_ms:.3f}, tail_fraction={found.tail_fraction:.5f}")
    print(stream_stats(generate(found, seed=args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
