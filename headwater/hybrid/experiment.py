"""``headwater experiment hpm``: HPM, MP-K-slack and AQ-K-slack over the same stream.

Writes ``DIR/metrics.json`` and four PNG plots (docs/hybrid.md, "The experiment").
AQ-K-slack and HPM share their stream module (the quality-driven K-slack), so
it runs once; HPM adds the batch module's corrections. On Spark (the default,
:mod:`headwater.hybrid.on_spark`) or on the local runner (:data:`RUNNERS`);
the work directory (``DIR/work`` unless ``--work``) holds the archive, the
changelog, the current-results table and Spark's checkpoints, and is emptied
when a run starts.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headwater.hybrid import metrics as M
from headwater.hybrid.experiment_options import DEFAULT_THROUGHPUT, RUNNER_NAMES, Throughput
from headwater.hybrid.generator import stream_stats
from headwater.hybrid.hpm import AppliedCorrection, StreamRun, apply_corrections, run_stream
from headwater.hybrid.pipeline import (
    Query,
    estimate_requirement,
    quality_driven,
    run_shard,
    shard_of,
    with_batches,
)
from headwater.model.slack import MaxDelaySlack, QualityDriven
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


@dataclass(frozen=True)
class Runs:
    """The runs the metrics are computed from."""

    truth: pd.DataFrame  # exact results
    mp: StreamRun
    aq: StreamRun  # HPM's stream module
    corrections: list[AppliedCorrection]  # HPM's


@dataclass(frozen=True)
class Job:
    """One experiment: the stream (with batch times), settings, shards, where to work."""

    stream: pd.DataFrame
    settings: Settings
    adaptive: QualityDriven
    shards: int
    throughput: Throughput
    work: Path
    progress: Progress


def run_experiment(
    stream: pd.DataFrame,
    out: Path,
    settings: Settings = Settings(),
    *,
    runner: str = "spark",
    shards: int = 1,
    throughput: Throughput = DEFAULT_THROUGHPUT,
    work: Path | None = None,
    progress: Progress | None = None,
) -> dict:
    """Run the three methods on ``runner`` ("spark" or "local"); write metrics.json and
    the plots into ``out``; the metrics."""
    q = settings.query
    steps = 5 + THROUGHPUT_STEPS[runner](throughput)
    progress = progress or Progress(steps, enabled=False)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(work or out / "work")
    shutil.rmtree(work, ignore_errors=True)
    stream = with_batches(stream, q)
    req = estimate_requirement(stream, q, settings.eps, settings.delta)
    adaptive = quality_driven(req, q, settings.kp, settings.kd)
    job = Job(stream, settings, adaptive, shards, throughput, work, progress)
    runs = RUNNERS[runner](job)
    result = _metrics(runs.mp, runs.aq, runs.corrections, runs.truth, settings)
    result["settings"] = _settings(settings, req, adaptive.lambda_thr, shards, stream)
    result["settings"]["runner"] = runner
    result["throughput"], result["throughput_setup"] = THROUGHPUT[runner](job)
    _plots(out, runs, q, result["throughput"])
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    progress.step("plots")
    return result


def _local_runs(job: Job) -> Runs:
    q, step = job.settings.query, job.progress.step
    truth = run_frame(job.stream, q.plan(job.stream, None)).panes
    step("exact results")
    mp = run_stream(job.stream, q, MaxDelaySlack(), job.shards)
    step("MP-K-slack")
    aq = run_stream(job.stream, q, job.adaptive, job.shards)
    step("quality-driven K-slack")
    corrections = apply_corrections(job.stream, aq, q, job.work / "hpm", gamma=job.settings.gamma)
    step("HPM corrections")
    return Runs(truth, mp, aq, corrections)


def _spark_runs(job: Job) -> Runs:
    from headwater.hybrid.on_spark import spark_runs

    q = job.settings.query
    runs = spark_runs(
        job.stream,
        q,
        job.adaptive,
        gamma=job.settings.gamma,
        shards=job.shards,
        work=job.work / "spark",
        step=job.progress.step,
    )
    return Runs(runs.truth, runs.mp, runs.aq, runs.corrections)


def _local_throughput(job: Job) -> tuple[dict, dict]:
    rates = {}
    for n in job.throughput.shards:
        rates[str(n)] = _throughput(job.stream, job.settings.query, job.adaptive, n)
        job.progress.step(f"throughput, {n} shards")
    return {"local": rates}, {"local": {"processes": "one per shard", "tuples": len(job.stream)}}


def _spark_throughput(job: Job) -> tuple[dict, dict]:
    from headwater.hybrid.on_spark import densify, spark_throughput

    t, q = job.throughput, job.settings.query
    if not t.masters:
        return {}, {}
    stream = job.stream if t.events is None else job.stream.iloc[: t.events]
    measured = spark_throughput(
        densify(stream, q, t.density),
        q,
        job.adaptive,
        t.shards,
        job.work / "throughput",
        t.masters,
        repeats=t.repeats,
        step=job.progress.step,
    )
    rates = {master: m.pop("rates") for master, m in measured.items()}
    return rates, {**measured, "density": t.density}


#: The runs of each ``--runner``.
RUNNERS: dict[str, Callable[[Job], Runs]] = {"spark": _spark_runs, "local": _local_runs}
assert set(RUNNERS) == set(RUNNER_NAMES)
#: The throughput measurement of each ``--runner``: ``{where: {shards: tuples/s}}`` and
#: what it ran on.
THROUGHPUT: dict[str, Callable[[Job], tuple[dict, dict]]] = {
    "spark": _spark_throughput,
    "local": _local_throughput,
}
#: Progress steps of each runner's throughput measurement.
THROUGHPUT_STEPS: dict[str, Callable[[Throughput], int]] = {
    "spark": lambda t: len(t.masters),
    "local": lambda t: len(t.shards),
}


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
    parts = [part for part in parts if len(part)]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=shards) as pool:
        list(pool.map(run_shard, parts, [q] * len(parts), [strategy] * len(parts)))
    return len(stream) / (time.perf_counter() - start)


def _plots(out: Path, runs: Runs, q: Query, throughput: dict) -> None:
    from headwater.hybrid import plots  # matplotlib: only when plotting

    mp, aq, corrections, truth = runs.mp, runs.aq, runs.corrections, runs.truth

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
    series = {where: ([int(n) for n in r], list(r.values())) for where, r in throughput.items()}
    if series:  # not measured: no plot
        plots.throughput_plot(out / "throughput.png", series)
