"""The experiment's PNG plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
import numpy as np  # noqa: E402

#: Line label of each method.
LABELS = {
    "hpm": "HPM",
    "mp_k_slack": "MP-K-slack",
    "aq_k_slack": "AQ-K-slack",
    "quality_driven": "HPM = AQ-K-slack (quality-driven)",
}


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def buffer_plot(path: Path, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """K (s) against processing time (s), one line per method (shard 0)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, (t, k) in series.items():
        ax.step(t / 1000, k / 1000, where="post", label=LABELS[name], lw=1)
    ax.set(xlabel="processing time (s)", ylabel="buffer K (s)", title="Buffer size over time")
    ax.legend()
    _save(fig, path)


def latency_plot(path: Path, latency: dict[str, float]) -> None:
    """Average result latency per method."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = list(latency)
    ax.bar([LABELS[n] for n in names], [latency[n] for n in names], color="C0")
    ax.set(ylabel="average latency (s)", title="Average result latency")
    _save(fig, path)


def accuracy_plot(path: Path, times: np.ndarray, accuracy: dict[str, np.ndarray]) -> None:
    """Fraction of the results emitted so far that are exact, against processing time."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, values in accuracy.items():
        ax.plot(times / 1000, values, label=LABELS[name], lw=1.2)
    ax.set(
        xlabel="processing time (s)",
        ylabel="exact results so far",
        title="Cumulative result accuracy",
    )
    ax.legend()
    _save(fig, path)


def throughput_plot(path: Path, series: dict[str, tuple[list[int], list[float]]]) -> None:
    """Stream-module throughput (tuples/s) against the number of shards, one line per
    place it was measured (a Spark master, or the local runner's processes)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ticks: set[int] = set()
    for where, (shards, rate) in series.items():
        ax.plot(shards, rate, marker="o", label=where)
        ticks.update(shards)
    ax.set(xlabel="shards", ylabel="tuples / s", title="Stream-module throughput")
    ax.set_xticks(sorted(ticks))
    ax.set_ylim(bottom=0)
    ax.legend()
    _save(fig, path)
