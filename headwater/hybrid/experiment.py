"""``headwater experiment hpm``: HPM, MP-K-slack and AQ-K-slack over the same stream.

Writes ``DIR/metrics.json`` and four PNG plots (docs/hybrid.md, "The experiment").
AQ-K-slack and HPM share their stream module (the quality-driven K-slack), so
it runs once; HPM adds the batch module's corrections.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headwater.hybrid import metrics as M
from headwater.hybrid import plots
from headwater.hybrid.generator import generate, profile, read_stream, stream_stats
from headwater.hybrid.hpm import apply_corrections, run_stream
from headwater.hybrid.pipeline import (
    Query,
    estimate_requirement,
    quality_driven,
    run_shard,
    shard_of,
    with_batches,
)
from headwater.model.slack import MaxDelaySlack
from headwater.runners.local import run_frame


@dataclass(frozen=True)
class Settings:
    """The paper's settings are the defaults (times in ms)."""

    kp: float = 0.2
    kd: float = 4.0
    gamma: int = 5000
    eps: float = 0.05
    delta: float = 0.05
    query: Query = Query()


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled

    def step(self, label: str) -> None:
        self.done += 1
        if self.enabled:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "." * (30 - filled)
            sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {label:<32}")
            sys.stderr.flush()
            if self.done == self.total:
                sys.stderr.write("\n")


def run_experiment(
    stream: pd.DataFrame,
    out: Path,
    settings: Settings = Settings(),
    *,
    shards: int = 1,
    throughput_shards: tuple[int, ...] = (1, 2, 4),
    progress: Progress | None = None,
) -> dict:
    """Run the three methods; write metrics.json and the plots into ``out``; the metrics."""
    q = settings.query
    progress = progress or Progress(5 + len(throughput_shards), enabled=False)
    out.mkdir(parents=True, exist_ok=True)
    stream = with_batches(stream, q)
    truth = run_frame(stream, q.plan(stream, None)).panes
    progress.step("exact results")
    req = estimate_requirement(stream, q, settings.eps, settings.delta)
    adaptive = quality_driven(req, q, settings.kp, settings.kd)
    mp = run_stream(stream, q, MaxDelaySlack(), shards)
    progress.step("MP-K-slack")
    aq = run_stream(stream, q, adaptive, shards)
    progress.step("quality-driven K-slack")
    corrections = apply_corrections(stream, aq, q, out / "hpm", gamma=settings.gamma)
    progress.step("HPM corrections")
    result = _metrics(mp, aq, corrections, truth, settings)
    result["settings"] = _settings(settings, req, adaptive.lambda_thr, shards, stream)
    rates = [_throughput(stream, q, adaptive, n) for n in throughput_shards]
    for n in throughput_shards:
        progress.step(f"throughput, {n} shards")
    result["throughput"] = {str(n): r for n, r in zip(throughput_shards, rates, strict=True)}
    _plots(out, mp, aq, corrections, truth, q, (list(throughput_shards), rates))
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    progress.step("plots")
    return result


def _metrics(mp, aq, corrections, truth, s: Settings) -> dict:
    q = s.query
    mp_m = M.stream_metrics(mp, truth, q, s.eps)
    aq_m = M.stream_metrics(aq, truth, q, s.eps)
    final_aq = M.relative_errors(aq.panes, truth, q).max()
    final_hpm = M.relative_errors(M.final_values(aq, corrections, q), truth, q).max()
    return {
        "hpm": M.MethodMetrics(
            **aq_m, final_max_rel_error=float(final_hpm), **M.correction_metrics(corrections, q)
        ).as_dict(),
        "mp_k_slack": M.MethodMetrics(
            **mp_m, final_max_rel_error=float(M.relative_errors(mp.panes, truth, q).max())
        ).as_dict(),
        "aq_k_slack": M.MethodMetrics(**aq_m, final_max_rel_error=float(final_aq)).as_dict(),
    }


def _settings(s: Settings, req, lambda_thr: float, shards: int, stream) -> dict:
    stats = stream_stats(stream)
    return {
        "kp": s.kp,
        "kd": s.kd,
        "gamma_s": s.gamma / 1000,
        "eps": s.eps,
        "delta": s.delta,
        "window_s": s.query.size / 1000,
        "slide_s": s.query.period / 1000,
        "aggregate": "sum",
        "window_tuples": req.window_tuples,
        "value_cv": round(req.value_cv, 4),
        "lambda_thr": lambda_thr,
        "shards": shards,
        "tuples": stats.tuples,
        "late_fraction": round(stats.late_fraction, 4),
        "mean_delay_ms": round(stats.mean_delay_ms, 2),
        "max_delay_ms": stats.max_delay_ms,
    }


def _throughput(stream, q: Query, strategy, shards: int) -> float:
    """Tuples per second of the stream module with ``shards`` shards in as many processes."""
    parts = [shard_of(stream, q, i, shards) for i in range(shards)]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=shards) as pool:
        list(pool.map(run_shard, parts, [q] * shards, [strategy] * shards))
    return len(stream) / (time.perf_counter() - start)


def _plots(out: Path, mp, aq, corrections, truth, q: Query, throughput) -> None:
    def k_series(run):
        shard = run.shards[0]
        return shard.batch_times, shard.trace.slack

    plots.buffer_plot(
        out / "buffer.png", {"mp_k_slack": k_series(mp), "quality_driven": k_series(aq)}
    )
    latency = {}
    for name, run in (("hpm", aq), ("mp_k_slack", mp), ("aq_k_slack", aq)):
        latency[name] = float((run.panes["time"] - run.panes["window_end"]).mean()) / 1000
    plots.latency_plot(out / "latency.png", latency)
    times = np.linspace(aq.panes["time"].min(), aq.panes["time"].max(), 60)
    accuracy = {
        "hpm": M.accuracy_over_time(aq, corrections, truth, q, times),
        "aq_k_slack": M.accuracy_over_time(aq, [], truth, q, times),
        "mp_k_slack": M.accuracy_over_time(mp, [], truth, q, times),
    }
    plots.accuracy_plot(out / "accuracy.png", times, accuracy)
    plots.throughput_plot(out / "throughput.png", *throughput, runner="local")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headwater experiment",
        description="HPM against MP-K-slack and AQ-K-slack (docs/hybrid.md)",
    )
    p.add_argument("experiment", choices=["hpm"])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", choices=["game1", "game2"], help="a generated stream")
    src.add_argument("--input", help="your own stream: CSV or Parquet (see --event-time ...)")
    p.add_argument("--events", type=int, help="tuples to generate (default: the profile's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--runner", choices=["local"], default="local")
    p.add_argument("--out", required=True, help="output directory")
    for name, default in (("event-time", "ts"), ("arrival", "arrival"), ("key", "sensor")):
        p.add_argument(f"--{name}", default=default, help=f"--input's column (default {default})")
    p.add_argument("--value", default="speed", help="--input's summed column (default speed)")
    p.add_argument("--arrival-is-order", action="store_true", help="--arrival is a position")
    p.add_argument("--throughput-shards", default="1,2,4", help="shard counts to time")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.input:
        stream = read_stream(
            args.input,
            event_time=args.event_time,
            arrival=args.arrival,
            key=args.key,
            value=args.value,
            arrival_is_order=args.arrival_is_order,
        )
    else:
        stream = generate(profile(args.profile), seed=args.seed, events=args.events)
    counts = tuple(int(n) for n in args.throughput_shards.split(","))
    progress = Progress(5 + len(counts), enabled=not args.no_progress)
    out = Path(args.out)
    result = run_experiment(
        stream, out, shards=args.shards, throughput_shards=counts, progress=progress
    )
    print(json.dumps({k: v for k, v in result.items() if k != "settings"}, indent=2))
    print(f"wrote {out / 'metrics.json'} and plots in {os.fspath(out)}")
    return 0
