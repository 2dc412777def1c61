"""Core benchmark: headwater's column-wise reducer against Beam's Python direct runner.

    headwater bench core [--elements N] [--keys K] [--bundles B] [--seed S]
                         [--beam-elements M] [--json]

One deterministic, out-of-order input and one timeline run through both:

* input: N elements over K keys (uniform), integer values 0..99. Element i
  "happens" at ``T0 + i * BUNDLE_SPAN / (N / B)`` (T0 = 2023-11-14, epoch ms)
  and carries that time minus a random delay: 90% uniform in [0, 8 s), 10%
  exponential with mean 40 s (the stragglers). Elements arrive in index order,
  N / B per bundle.
* timeline, per bundle: the bundle, then processing time advances by 2 s, then
  the watermark advances to (the latest "happens" time of the bundle - 10 s),
  rounded down to a whole second, minus 0.5 s (a watermark never equals a window
  boundary, where Beam and headwater drop differently). After the last bundle
  the watermark goes to infinity. The watermark is heuristic: stragglers arrive
  behind it (late panes) and a few beyond the allowed lateness (dropped).
* strategy: ``FixedWindows(60 s)``, ``AfterWatermark(early=AfterProcessingTime(1 s),
  late=AfterCount(1))``, accumulating, allowed lateness 120 s, end-of-window
  timestamps; aggregation: the sum of the values per key and window.

headwater: ``LocalRunner.run_steps`` over ``Bundle`` / ``ClockAdvance`` /
``WatermarkAdvance`` steps (numpy arrays, one pandas column per bundle).
Beam: a streaming ``BundleBasedDirectRunner`` pipeline ``TestStream`` (one
``add_elements`` per bundle, ``advance_processing_time``,
``advance_watermark_to``, ``advance_watermark_to_infinity``) ->
``WindowInto`` (same windowing, trigger, accumulation, lateness) ->
``CombinePerKey(sum)`` -> a DoFn that counts the panes.

What is timed: the run only, on both sides. headwater: ``run_steps`` (the
steps are built beforehand). Beam: ``pipeline.run()`` until the end of the
input has been processed (the TestStream events, the ``TimestampedValue``
objects and the pipeline graph are built beforehand; that construction time is
reported separately as ``construct_seconds`` and is NOT in the throughput,
which favours Beam). Imports are not timed. The pipeline runs as built
(``test_runner_api=False``): the runner-API round trip would truncate the
processing-time delay to whole seconds and only add cost.

Both sides report their panes (by timing) and a checksum: the sum over all
(key, window) of the value of its last pane (accumulating mode: everything
kept in that window), which equals the sum of all values minus those of
dropped elements. Equal checksums and pane counts of the same order mean the
two runs did the same work. Known Beam Python differences (see
``headwater.testing.beam_oracle.KNOWN_DIVERGENCES``) shift a few panes between
timings (e.g. Beam labels the first pane of a window that receives its first
data only after the watermark passed it LATE, headwater ON_TIME).

``--beam-elements M`` (< N) runs Beam on a prefix for a quick look: the first
M elements in arrival order with the same bundle boundaries, the timeline cut
after the bundle holding element M. headwater then also runs that prefix, so
panes and checksums are still compared on equal input; the headline ratio
compares headwater on the full input with Beam on the prefix (said so in the
output), ``ratio_same_input`` both on the prefix.

``ratio`` = headwater elements/s / Beam elements/s (wall time); the target is
>= 20. Both sides also report ``cpu_seconds`` (process CPU time of the run, Beam's
worker threads included) and ``cpu_ratio`` = Beam's CPU time per element / headwater's,
which other load on the machine (shown as the 1-minute load average before and
after) distorts less than wall time.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwater.bench import HelpFormatter

T0_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
BUNDLE_SPAN_MS = 6_000  # event time covered by one bundle
WINDOW_MS = 60_000
EARLY_DELAY_MS = 1_000
ALLOWED_LATENESS_MS = 120_000
CLOCK_STEP_MS = 2_000  # processing time between bundles (> EARLY_DELAY_MS)
WATERMARK_LAG_MS = 10_000
STRAGGLER_FRACTION = 0.10
STRAGGLER_MEAN_DELAY_MS = 40_000
NORMAL_MAX_DELAY_MS = 8_000
TARGET_RATIO = 20.0

STRATEGY_TEXT = (
    "FixedWindows(60 s), AfterWatermark(early=AfterProcessingTime(1 s), late=AfterCount(1)), "
    "accumulating, allowed lateness 120 s, sum per key"
)


# --------------------------------------------------------------------------
# input and timeline
# --------------------------------------------------------------------------


@dataclass
class Workload:
    keys: np.ndarray  # int64, arrival order
    timestamps: np.ndarray  # int64 ms, event time
    values: np.ndarray  # int64
    bounds: np.ndarray  # bundle b = elements bounds[b]:bounds[b+1]
    watermarks: np.ndarray  # int64 ms, the watermark after bundle b

    def __len__(self) -> int:
        return len(self.keys)

    def prefix(self, m: int) -> Workload:
        """The first ``m`` elements; the timeline ends after the bundle holding the last."""
        if m >= len(self):
            return self
        nb = int(np.searchsorted(self.bounds, m, side="left"))  # bundles touched
        nb = max(nb, 1)
        bounds = np.minimum(self.bounds[: nb + 1], m)
        return Workload(
            self.keys[:m], self.timestamps[:m], self.values[:m], bounds, self.watermarks[:nb]
        )

    @property
    def bundles(self) -> int:
        return len(self.bounds) - 1


def make_workload(elements: int, keys: int, bundles: int, seed: int) -> Workload:
    """The deterministic out-of-order input and its watermark timeline."""
    if elements < 1 or keys < 1 or bundles < 1:
        raise ValueError("elements, keys and bundles must be positive")
    rng = np.random.default_rng(seed)
    idx = np.arange(elements, dtype=np.int64)
    bounds = (np.arange(bundles + 1, dtype=np.int64) * elements) // bundles
    per_bundle = elements / bundles
    happens = T0_MS + np.floor(idx * (BUNDLE_SPAN_MS / per_bundle)).astype(np.int64)
    delay = rng.integers(0, NORMAL_MAX_DELAY_MS, elements)
    straggler = rng.random(elements) < STRAGGLER_FRACTION
    tail = np.ceil(rng.exponential(STRAGGLER_MEAN_DELAY_MS, elements)).astype(np.int64)
    delay = np.where(straggler, tail, delay)
    timestamps = happens - delay
    k = rng.integers(0, keys, elements).astype(np.int64)
    values = rng.integers(0, 100, elements).astype(np.int64)
    watermarks = []
    wm_prev = None
    for b in range(bundles):
        lo, hi = bounds[b], bounds[b + 1]
        latest = int(happens[hi - 1]) if hi > lo else T0_MS + b * BUNDLE_SPAN_MS
        wm = (latest - WATERMARK_LAG_MS) // 1000 * 1000 - 500
        if wm_prev is not None:
            wm = max(wm, wm_prev)
        watermarks.append(wm)
        wm_prev = wm
    return Workload(k, timestamps, values, bounds, np.asarray(watermarks, dtype=np.int64))


# --------------------------------------------------------------------------
# headwater
# --------------------------------------------------------------------------


def _headwater_strategy():
    from headwater.model.combiners import Sum
    from headwater.model.strategy import WindowingStrategy
    from headwater.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark
    from headwater.model.windows import FixedWindows

    strategy = WindowingStrategy.of(
        FixedWindows(WINDOW_MS / 1000),
        AfterWatermark(early=AfterProcessingTime(EARLY_DELAY_MS / 1000), late=AfterCount(1)),
        "accumulating",
        allowed_lateness=ALLOWED_LATENESS_MS / 1000,
    )
    return strategy, {"total": (Sum(), "value")}


def _headwater_steps(w: Workload) -> list:
    from headwater.model.time import MAX_TIMESTAMP
    from headwater.runners.local import Bundle, ClockAdvance, WatermarkAdvance

    steps: list = []
    for b in range(w.bundles):
        lo, hi = int(w.bounds[b]), int(w.bounds[b + 1])
        if hi > lo:
            steps.append(
                Bundle(
                    w.keys[lo:hi],
                    w.timestamps[lo:hi],
                    pd.DataFrame({"value": w.values[lo:hi]}),
                )
            )
        steps.append(ClockAdvance((b + 1) * CLOCK_STEP_MS))
        steps.append(WatermarkAdvance(int(w.watermarks[b])))
    steps.append(WatermarkAdvance(MAX_TIMESTAMP))
    return steps


def run_headwater(w: Workload) -> dict:
    from headwater.runners.local import LocalRunner

    strategy, aggregations = _headwater_strategy()
    t0 = time.perf_counter()
    steps = _headwater_steps(w)
    construct = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    emissions = LocalRunner().run_steps(strategy, aggregations, steps)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    panes = pd.concat([e.panes for e in emissions], ignore_index=True)
    dropped = sum(len(e.dropped) for e in emissions)
    if "is_retraction" in panes:
        panes = panes[~panes["is_retraction"].astype(bool)]
    timing = panes["timing"].astype(str).value_counts().to_dict()
    last = panes.sort_values("pane_index").drop_duplicates(
        ["key", "window_start", "window_end"], keep="last"
    )
    return {
        "elements": len(w),
        "bundles": w.bundles,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "construct_seconds": construct,
        "elements_per_s": len(w) / seconds if seconds > 0 else math.inf,
        "panes": int(len(panes)),
        "panes_by_timing": {k: int(v) for k, v in sorted(timing.items())},
        "windows": int(len(last)),
        "dropped": int(dropped),
        "checksum": int(last["total"].astype(np.int64).sum()),
    }


# --------------------------------------------------------------------------
# Beam
# --------------------------------------------------------------------------

_MARKER_TAG = "headwater_bench_end"
_TIMING_NAMES = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}


class _Collector:
    """Pane statistics of one Beam run (filled by the DoFns, in this process)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.panes = 0
        self.by_timing: dict[str, int] = {}
        self.last: dict[tuple, tuple[int, int]] = {}  # (key, window end) -> (index, total)
        self.marker = threading.Event()  # the end-of-input marker arrived
        self.finished = threading.Event()  # the marker arrived or the pipeline ended


_COLLECTORS: dict[str, _Collector] = {}


def _registry() -> dict[str, _Collector]:
    """The collectors, looked up by module name: Beam pickles the DoFns (classes
    defined in a function are pickled by value, with copies of the globals they
    use), and ``python -m headwater.bench.core`` runs this file as ``__main__``."""
    import importlib

    return importlib.import_module("headwater.bench.core")._COLLECTORS


def _beam_dofns():
    import apache_beam as beam

    class CountPanes(beam.DoFn):
        def __init__(self, run_id: str):
            self.run_id = run_id

        def process(self, element, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
            key, total = element
            c = _registry().get(self.run_id)
            if c is None:
                return
            timing = _TIMING_NAMES.get(getattr(pane.timing, "value", pane.timing), "UNKNOWN")
            wkey = (key, window.end.micros)
            with c.lock:
                c.panes += 1
                c.by_timing[timing] = c.by_timing.get(timing, 0) + 1
                prev = c.last.get(wkey)
                if prev is None or pane.index >= prev[0]:
                    c.last[wkey] = (pane.index, total)

    class EndMarker(beam.DoFn):
        def __init__(self, run_id: str):
            self.run_id = run_id

        def process(self, element):
            c = _registry().get(self.run_id)
            if c is not None:
                c.marker.set()
                c.finished.set()

    return CountPanes, EndMarker


def _beam_test_stream(w: Workload):
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue
    from apache_beam.utils.timestamp import Timestamp

    stream = TestStream()
    keys = w.keys.tolist()
    values = w.values.tolist()
    micros = (w.timestamps * 1000).tolist()
    for b in range(w.bundles):
        lo, hi = int(w.bounds[b]), int(w.bounds[b + 1])
        if hi > lo:
            stream.add_elements(
                [
                    TimestampedValue((keys[i], values[i]), Timestamp(micros=micros[i]))
                    for i in range(lo, hi)
                ]
            )
        stream.advance_processing_time(CLOCK_STEP_MS / 1000)
        stream.advance_watermark_to(Timestamp(micros=int(w.watermarks[b]) * 1000))
    stream.advance_watermark_to_infinity()
    stream.add_elements([0], tag=_MARKER_TAG)
    return stream


def run_beam(w: Workload, timeout: float) -> dict:
    """Run the workload through Beam's streaming direct runner; see the module docstring."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # importing Beam warns "apitools not found"
    try:
        import apache_beam as beam
    finally:
        logging.disable(previous)
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        StandardOptions,
        TypeOptions,
    )
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.transforms import trigger as tr
    from apache_beam.transforms import window as bw
    from apache_beam.utils.timestamp import Duration

    for name in ("apache_beam", "apache_beam.runners", "apache_beam.transforms.trigger"):
        logging.getLogger(name).setLevel(logging.ERROR)

    CountPanes, EndMarker = _beam_dofns()
    run_id = uuid.uuid4().hex
    collector = _Collector()
    registry = _registry()
    registry[run_id] = collector
    try:
        t0 = time.perf_counter()
        stream = _beam_test_stream(w)
        options = PipelineOptions([])
        options.view_as(StandardOptions).streaming = True
        options.view_as(TypeOptions).allow_unsafe_triggers = True
        options.view_as(DirectOptions).direct_num_workers = 1
        p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
        outputs = p | "TestStream" >> stream
        _ = outputs[_MARKER_TAG] | "End" >> beam.ParDo(EndMarker(run_id))
        _ = (
            outputs[None]
            | "Window"
            >> beam.WindowInto(
                bw.FixedWindows(WINDOW_MS / 1000),
                trigger=tr.AfterWatermark(
                    early=tr.AfterProcessingTime(EARLY_DELAY_MS / 1000),
                    late=tr.AfterCount(1),
                ),
                accumulation_mode=tr.AccumulationMode.ACCUMULATING,
                allowed_lateness=Duration(micros=ALLOWED_LATENESS_MS * 1000),
            )
            | "Sum" >> beam.CombinePerKey(sum)
            | "Count" >> beam.ParDo(CountPanes(run_id))
        )
        construct = time.perf_counter() - t0

        t0, c0 = time.perf_counter(), time.process_time()
        ending = _execute(p, collector, timeout)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        registry.pop(run_id, None)
    return {
        "elements": len(w),
        "bundles": w.bundles,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "construct_seconds": construct,
        "elements_per_s": len(w) / seconds if seconds > 0 else math.inf,
        "panes": collector.panes,
        "panes_by_timing": dict(sorted(collector.by_timing.items())),
        "windows": len(collector.last),
        "checksum": int(sum(total for _, total in collector.last.values())),
        "ending": ending,
    }


def _execute(pipeline, collector: _Collector, timeout: float) -> str:
    """Run until the end marker (emitted after the watermark reached infinity) arrives.

    The direct runner processes a TestStream event only once the pipeline is
    quiescent, so the marker means every pane has been counted. Beam Python
    streaming pipelines do not always stop on their own (a pending
    processing-time timer keeps them spinning; a watermark hold makes the
    runner report a stall), so the run is cancelled if it has not ended shortly
    after the marker. Returns "finished", "stalled" or "cancelled".
    """
    from headwater.testing.beam_oracle import cancel_pipeline

    result = pipeline.run(test_runner_api=False)
    box: dict[str, BaseException] = {}
    done = threading.Event()

    def wait():
        try:
            result.wait_until_finish()
        except BaseException as e:  # noqa: BLE001 - inspected below
            box["error"] = e
        finally:
            done.set()
            collector.finished.set()

    waiter = threading.Thread(target=wait, name="bench-beam-wait", daemon=True)
    waiter.start()
    if not collector.finished.wait(timeout):
        cancel_pipeline(result)
        raise RuntimeError(f"Beam did not reach the end of its input within {timeout:.0f} s")
    done.wait(1.0)
    marker_seen = collector.marker.is_set()
    if not done.is_set():
        cancel_pipeline(result)
        waiter.join(10.0)
        return "cancelled"
    error = box.get("error")
    if error is None:
        if not marker_seen:
            raise RuntimeError("Beam pipeline ended without reaching the end of its input")
        return "finished"
    text = str(error)
    stall = "pipeline stall" in text or "exceptions must derive from BaseException" in text
    if stall and marker_seen:
        return "stalled"
    raise RuntimeError(f"Beam pipeline failed: {error!r}") from error


# --------------------------------------------------------------------------
# command
# --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headwater bench core",
        description="Fixed-window early/on-time/late sum: headwater's local runner "
        "against Beam's Python direct runner on the same input and timeline.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--elements", type=int, default=1_000_000, help="elements of the input")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    p.add_argument("--bundles", type=int, default=100, help="bundles the input arrives in")
    p.add_argument("--seed", type=int, default=0, help="random seed of the input")
    p.add_argument(
        "--beam-elements",
        type=int,
        default=None,
        help="run Beam on only the first M elements (None: all of them, the same input)",
    )
    p.add_argument(
        "--beam-timeout",
        type=float,
        default=4 * 3600.0,
        help="give up on Beam after this many seconds",
    )
    p.add_argument("--skip-beam", action="store_true", help="run headwater only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def _cpu_per_element(r: dict) -> float:
    return max(r["cpu_seconds"], 1e-9) / r["elements"]


def _load() -> float | None:
    """The 1-minute load average: other work on the machine distorts wall times."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on this platform
        return None


def _fmt_timing(d: dict) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in d.items())


def _compare(hw: dict, beam: dict) -> dict:
    """How far apart the two runs' outputs are (same input)."""
    return {
        "panes_ratio": beam["panes"] / hw["panes"] if hw["panes"] else None,
        "windows_equal": beam["windows"] == hw["windows"],
        "checksum_equal": beam["checksum"] == hw["checksum"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    beam_elements = args.elements if args.beam_elements is None else args.beam_elements
    if not 1 <= beam_elements <= args.elements:
        print("headwater bench core: --beam-elements must be in 1..--elements", file=sys.stderr)
        return 2

    workload = make_workload(args.elements, args.keys, args.bundles, args.seed)
    out: dict = {
        "benchmark": "core",
        "strategy": STRATEGY_TEXT,
        "elements": args.elements,
        "keys": args.keys,
        "bundles": args.bundles,
        "seed": args.seed,
        "beam_elements": None if args.skip_beam else beam_elements,
        "beam_prefix": (not args.skip_beam) and beam_elements < args.elements,
        "timed": "run only (input/TestStream/pipeline construction excluded, reported as "
        "construct_seconds; imports excluded)",
        "target_ratio": TARGET_RATIO,
    }
    out["load_average_before"] = _load()
    out["headwater"] = hw = run_headwater(workload)
    if not args.skip_beam:
        beam_input = workload.prefix(beam_elements)
        same = out["beam_prefix"] is False
        hw_same = hw if same else run_headwater(beam_input)
        if not same:
            out["headwater_prefix"] = hw_same
        out["beam"] = beam = run_beam(beam_input, args.beam_timeout)
        out["ratio"] = hw["elements_per_s"] / beam["elements_per_s"]
        out["ratio_same_input"] = hw_same["elements_per_s"] / beam["elements_per_s"]
        out["cpu_ratio"] = _cpu_per_element(beam) / _cpu_per_element(hw)
        out["target_met"] = out["ratio"] >= TARGET_RATIO
        out["comparison"] = _compare(hw_same, beam)

    out["load_average_after"] = _load()
    if args.json:
        print(json.dumps(out, indent=None, sort_keys=False))
        return 0

    print(f"core benchmark: {STRATEGY_TEXT}")
    print(
        f"input: {args.elements:,} elements, {args.keys:,} keys, {args.bundles} bundles, "
        f"seed {args.seed}; timed: the run only (construction and imports excluded)"
    )
    print(
        f"headwater: {hw['elements_per_s']:>14,.0f} elements/s  ({hw['seconds']:.2f} s; "
        f"{hw['panes']:,} panes: {_fmt_timing(hw['panes_by_timing'])}; "
        f"{hw['dropped']:,} dropped)"
    )
    if args.skip_beam:
        return 0
    beam = out["beam"]
    if out["beam_prefix"]:
        hp = out["headwater_prefix"]
        print(
            f"NOTE: Beam ran on a PREFIX: the first {beam_elements:,} of {args.elements:,} "
            f"elements ({beam['bundles']} of {args.bundles} bundles), not the full input."
        )
        print(
            f"headwater on that prefix: {hp['elements_per_s']:,.0f} elements/s "
            f"({hp['seconds']:.2f} s; {hp['panes']:,} panes: {_fmt_timing(hp['panes_by_timing'])})"
        )
    print(
        f"beam:      {beam['elements_per_s']:>14,.0f} elements/s  ({beam['seconds']:.2f} s run "
        f"+ {beam['construct_seconds']:.2f} s construction; {beam['panes']:,} panes: "
        f"{_fmt_timing(beam['panes_by_timing'])}; pipeline {beam['ending']})"
    )
    label = "ratio (headwater full / beam prefix)" if out["beam_prefix"] else "ratio"
    print(
        f"{label}: {out['ratio']:,.1f}x  (target >= {TARGET_RATIO:.0f}x: "
        f"{'met' if out['target_met'] else 'NOT met'})"
    )
    if out["beam_prefix"]:
        print(f"ratio on the same prefix: {out['ratio_same_input']:,.1f}x")
    print(
        f"cpu time per element, beam / headwater: {out['cpu_ratio']:,.1f}x "
        f"(load average {out['load_average_before']} before, {out['load_average_after']} after)"
    )
    cmp_ = out["comparison"]
    print(
        f"outputs: beam/headwater panes {cmp_['panes_ratio']:.3f}; windows "
        f"{'equal' if cmp_['windows_equal'] else 'DIFFER'}; checksum (sum of last panes) "
        f"{'equal' if cmp_['checksum_equal'] else 'DIFFERS'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
