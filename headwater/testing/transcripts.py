"""Run trigger/windowing conformance transcripts (format: docs/transcripts.md).

    python -m headwater.testing.transcripts FILE.yaml [...] [--runner local|spark]

Every document of every file is one test. A failing test prints one line with
its first difference; the run ends with ``N passed, M failed``.

Besides the events of the shared format, a transcript may write one micro-batch
that carries several parts together (docs/semantics.md, "one step")::

    - step: {clock: 12, input: [3, 5], watermark: 10}

rows arrive at processing time 12 and the watermark advances to 10, then the
triggers are evaluated once and the timers due by 12 fire. Each part is
optional; without ``clock`` the step fires no processing-time timers.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from headwater.model import combiners, triggers, types, windows
from headwater.model.plan import Schema, WindowedAggregationPlan, build_plan
from headwater.model.reducer import Aggregations, Emission
from headwater.model.steps import (
    Bundle,
    ClockAdvance,
    MicroBatch,
    Step,
    WatermarkAdvance,
    as_micro_batch,
)
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import seconds_to_millis
from headwater.model.watermarks import Punctuated
from headwater.runners.local import LocalRunner

DEFAULT_KEY = "k"


class TranscriptError(AssertionError):
    """A transcript's expectations were not met."""


class CustomTimestampingFixedWindowsWindowFn(windows.FixedWindows):
    """Beam's test window function: output time of an element is its timestamp + 100 s."""

    def output_time(self, starts, ends, ts):
        return ts + 100_000


_WINDOW_NAMES = {
    "GlobalWindows": windows.GlobalWindows,
    "FixedWindows": windows.FixedWindows,
    "SlidingWindows": windows.SlidingWindows,
    "CumulativeWindows": windows.CumulativeWindows,
    "Sessions": windows.Sessions,
    "ValidityWindows": windows.ValidityWindows,
    "CalendarWindows": windows.CalendarWindows,
    "CustomTimestampingFixedWindowsWindowFn": CustomTimestampingFixedWindowsWindowFn,
}
_TRIGGER_NAMES = {
    name: getattr(triggers, name)
    for name in (
        "Default",
        "AfterWatermark",
        "AfterCount",
        "AfterProcessingTime",
        "Repeatedly",
        "AfterEach",
        "AfterAny",
        "AfterAll",
        "OrFinally",
        "Never",
    )
}


def _evaluate(text: str, names: dict) -> object:
    """Evaluate a window or trigger expression over an allow-list of names."""
    try:
        value = eval(compile(str(text), "<transcript>", "eval"), {"__builtins__": {}}, names)  # noqa: S307
    except Exception as exc:
        raise ValueError(f"cannot read {text!r}: {exc}") from exc
    return value() if isinstance(value, type) else value


@dataclass
class Document:
    """One parsed transcript: its plan (validated when parsed) and its events."""

    name: str
    plan: WindowedAggregationPlan
    events: list[dict]
    error: str | None
    broken_on: list[str]

    @property
    def strategy(self) -> WindowingStrategy:
        return self.plan.windowing

    @property
    def aggregations(self) -> Aggregations:
        return self.plan.core_aggregations

    @classmethod
    def parse(cls, doc: dict) -> Document:
        combine = doc.get("combine_fn")
        if combine is None:
            aggregations = {"values": (combiners.ToList(), "value")}
        elif combine in combiners.COMBINERS:
            aggregations = {"value": (combiners.COMBINERS[combine](), "value")}
        else:
            raise ValueError(f"unknown combine_fn {combine!r}")
        strategy = WindowingStrategy.of(
            window_fn=_evaluate(doc.get("window_fn", "GlobalWindows"), _WINDOW_NAMES),
            trigger=_evaluate(doc.get("trigger_fn", "Default"), _TRIGGER_NAMES),
            accumulation=doc.get("accumulation_mode", "accumulating"),
            allowed_lateness=doc.get("allowed_lateness", 0),
            timestamp_combiner=doc.get("timestamp_combiner", "OUTPUT_AT_EOW"),
        )
        events = list(doc.get("transcript") or [])
        plan = build_plan(
            _schema(events),
            keys=("k",),
            event_time="t",
            windowing=strategy,
            aggregations=aggregations,
            bounded=False,
            watermark=Punctuated(),
        )
        return cls(
            doc.get("name", "<unnamed>"),
            plan,
            events,
            doc.get("error"),
            doc.get("broken_on") or [],
        )


def _schema(events: list[dict]) -> Schema:
    """Columns of a transcript's elements: key ``k``, time ``t`` (ms), ``value``, and
    the watermark the timeline carries."""
    items = []
    for event in events:
        ((kind, arg),) = event.items()
        if kind == "step":
            arg = (arg or {}).get("input")
        elif kind != "input":
            continue
        items += [i if isinstance(i, dict) else {"t": i} for i in (arg or [])]
    keys = [i["k"] for i in items if "k" in i]
    values = [i.get("v", i["t"]) for i in items]
    return Schema.of(
        {
            "k": types.of_python(keys[0]) if keys else types.STRING,
            "t": types.INT64,
            "value": types.of_python(values[0]) if values else types.INT64,
            "watermark_ms": types.INT64,  # the replay's punctuation
        }
    )


def timeline(events: list[dict]) -> tuple[list[Step], list[tuple[int, list[dict]]]]:
    """Split events into steps and expectations (each tagged with the number of
    steps before it)."""
    steps: list[Step] = []
    expects: list[tuple[int, list[dict]]] = []
    now = 0
    for event in events:
        ((kind, arg),) = event.items()
        if kind == "input":
            steps.append(_bundle(arg))
        elif kind == "step":
            parts = dict(arg or {})
            unknown = set(parts) - {"clock", "input", "watermark"}
            if unknown:
                raise ValueError(f"unknown parts of a step: {sorted(unknown)}")
            if "clock" in parts:
                now = seconds_to_millis(float(parts["clock"]))
            watermark = parts.get("watermark")
            steps.append(
                MicroBatch(
                    _bundle(parts["input"]) if "input" in parts else None,
                    watermark=None if watermark is None else seconds_to_millis(float(watermark)),
                    now=now if "clock" in parts else None,
                    fire_timers="clock" in parts,
                )
            )
        elif kind == "watermark":
            steps.append(WatermarkAdvance(seconds_to_millis(float(arg))))
        elif kind == "clock":
            now = seconds_to_millis(float(arg))
            steps.append(ClockAdvance(now))
        elif kind == "expect":
            expects.append((len(steps), list(arg or [])))
        elif kind == "state":
            continue  # Beam's state assertions are not checked by any harness
        else:
            raise ValueError(f"unknown event {kind!r}")
    return steps, expects


def _bundle(items) -> Bundle:
    items = [i if isinstance(i, dict) else {"t": i} for i in (items or [])]
    keys = [i.get("k", DEFAULT_KEY) for i in items]
    ts = [seconds_to_millis(i["t"]) for i in items]
    return Bundle(keys, ts, [i.get("v", i["t"]) for i in items])


# ------------------------------------------------------------------ matching
def _window_of(pane: dict) -> object:
    if pane["window_end"] >= windows.GLOBAL_WINDOW_END:
        return "global"
    return [math.floor(pane["window_start"] / 1000), math.floor((pane["window_end"] - 1) / 1000)]


def _same(expected, actual) -> bool:
    if expected is None or actual is None:  # NULL: None, or NaN in a float column
        return _is_null(expected) and _is_null(actual)
    if isinstance(expected, float) or isinstance(actual, float):
        try:
            return bool(np.isclose(float(expected), float(actual), equal_nan=True))
        except (TypeError, ValueError):
            return False
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(map(_same, expected, actual))
    return expected == actual


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _field(pane: dict, name: str):
    timing = pane["timing"]
    getters: dict[str, Callable[[], object]] = {
        "window": lambda: _window_of(pane),
        "values": lambda: sorted(_plain(v) for v in pane["values"]),
        "value": lambda: _plain(pane["value"]),
        "timestamp": lambda: math.floor(pane["timestamp"] / 1000),
        "index": lambda: int(pane["pane_index"]),
        "nonspeculative_index": lambda: int(pane["nonspeculative_index"]),
        "early": lambda: timing == "EARLY",
        "late": lambda: timing == "LATE",
        "timing": lambda: timing,
        "first": lambda: bool(pane["is_first"]),
        "final": lambda: bool(pane["is_last"]),
        "retraction": lambda: bool(pane["is_retraction"]),
        "key": lambda: pane["key"],
    }
    if name not in getters:
        raise ValueError(f"unknown pane field {name!r}")
    return getters[name]()


def _plain(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    return v.item() if isinstance(v, np.generic) else v


def _matches(expected: dict, pane: dict) -> bool:
    for name, want in expected.items():
        if name == "retraction" and not want and not pane["is_retraction"]:
            continue
        if not _same(want, _field(pane, name)):
            return False
    return "retraction" in expected or not pane["is_retraction"] or False


def _describe(pane: dict) -> str:
    parts = {"window": _window_of(pane)}
    for name in ("values", "value"):
        if name in pane:
            parts[name] = _field(pane, name)
    parts.update(
        timestamp=_field(pane, "timestamp"),
        index=int(pane["pane_index"]),
        timing=pane["timing"],
        final=bool(pane["is_last"]),
    )
    if pane["is_retraction"]:
        parts["retraction"] = True
    if pane["key"] != DEFAULT_KEY:
        parts["key"] = pane["key"]
    return str(parts)


def check(expected: list[dict], produced: list[dict], where: str) -> None:
    """Multiset match of expected panes (partial keys) against produced panes."""
    owner: dict[int, int] = {}

    def assign(i: int, seen: set[int]) -> bool:
        for j, pane in enumerate(produced):
            if j in seen or not _matches(expected[i], pane):
                continue
            seen.add(j)
            if j not in owner or assign(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i, want in enumerate(expected):
        if not assign(i, set()):
            raise TranscriptError(
                f"Unmatched output {where}: expected {want}; produced "
                f"{[_describe(p) for p in produced] or 'nothing'}"
            )
    extra = [p for j, p in enumerate(produced) if j not in owner]
    if extra:
        raise TranscriptError(
            f"Unexpected output {where}: {_describe(extra[0])}"
            + (f" (+{len(extra) - 1} more)" if len(extra) > 1 else "")
        )


# -------------------------------------------------------------------- runners
TimelineRunner = Callable[[WindowedAggregationPlan, list[Step]], list[Emission]]


def local_runner(plan: WindowedAggregationPlan, steps: list[Step]) -> list[Emission]:
    return LocalRunner().run_steps(plan.windowing, plan.core_aggregations, steps)


def spark_runner(plan: WindowedAggregationPlan, steps: list[Step], **options) -> list[Emission]:
    from headwater.runners.spark.timeline import run_timeline

    return run_timeline(plan.windowing, plan.core_aggregations, steps, **options)


def _sharded_by_keys(plan: WindowedAggregationPlan, steps: list[Step], spark) -> list[Emission]:
    """:func:`spark_runner` with a shard per key, at most two: most documents have
    one key, and an empty shard still commits a state-store version every step."""
    rows = [as_micro_batch(step).rows for step in steps]
    keys = {k for bundle in rows if bundle is not None for k in bundle.keys}
    shards = min(2, max(1, len(keys)))
    return spark_runner(plan, steps, spark=spark, num_shards=shards, shuffle_partitions=None)


def _runner(name: str) -> TimelineRunner:
    if name == "local":
        return local_runner
    if name == "spark":
        from headwater.runners.spark.timeline import spark_session

        # One session for every document, built with the timelines' settings (two
        # shuffle partitions, RocksDB); each query starts with its own shard count.
        return functools.partial(_sharded_by_keys, spark=spark_session())
    raise ValueError(f"unknown runner {name!r}")


def run_document(doc: Document, runner: TimelineRunner) -> None:
    """Run one transcript; raise TranscriptError at the first difference."""
    steps, expects = timeline(doc.events)
    emissions = runner(doc.plan, steps)
    if len(emissions) != len(steps):
        raise TranscriptError(f"runner returned {len(emissions)} emissions for {len(steps)} steps")
    produced: list[dict] = []
    exp_iter = iter(expects)
    pending_expect = next(exp_iter, None)
    for i in range(len(steps) + 1):
        while pending_expect is not None and pending_expect[0] == i:
            check(pending_expect[1], produced, f"before step {i + 1}")
            produced = []
            pending_expect = next(exp_iter, None)
        if i == len(steps):
            break
        if produced:
            raise TranscriptError(
                f"Unexpected output before step {i + 1}: {_describe(produced[0])}"
            )
        produced = emissions[i].panes.to_dict("records")
    if produced:
        raise TranscriptError(f"Unexpected output at the end: {_describe(produced[0])}")


@dataclass(frozen=True)
class Case:
    """One document of a transcript file, to run."""

    label: str
    raw: dict


def _cases(paths: Sequence[str], runner_name: str) -> list[Case]:
    cases = []
    for path in paths:
        with open(path) as fh:
            raw_docs = [d for d in yaml.safe_load_all(fh) if d]
        for raw in raw_docs:
            if runner_name not in (raw.get("broken_on") or []):
                name = raw.get("name", "<unnamed>")
                cases.append(Case(f"{Path(path).name}::{name}", raw))
    return cases


def _error(case: Case, runner: TimelineRunner) -> str | None:
    """The case's difference, or None."""
    try:
        run_document(Document.parse(case.raw), runner)
    except (TranscriptError, ValueError, KeyError) as exc:
        return str(exc)
    return None


def _attempt(case: Case, runner: TimelineRunner) -> str | None | Exception:
    """:func:`_error`, or the exception the run raised (to retry it alone)."""
    try:
        return _error(case, runner)
    except Exception as exc:  # noqa: BLE001 - retried by run_files
        return exc


def _failure(case: Case, error: str | None) -> str | None:
    """The line a failed case prints, or None when it passed."""
    expected_error = case.raw.get("error")
    if expected_error:
        if error is not None and re.search(expected_error, error):
            return None
        return (
            f"FAIL {case.label}: expected an error matching {expected_error!r}, "
            f"got {error or 'success'}"
        )
    return None if error is None else f"FAIL {case.label}: {error}"


def run_files(
    paths: Sequence[str], runner_name: str = "local", out=sys.stdout, workers: int = 1
) -> tuple[int, int]:
    """Run every document; ``workers`` documents at a time (each a streaming query
    on Spark, where most of a micro-batch's time is waiting, not computing)."""
    runner = _runner(runner_name)
    cases = _cases(paths, runner_name)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        errors = list(pool.map(lambda case: _attempt(case, runner), cases))
    # A run that crashed (an overloaded machine: a Python worker that could not
    # connect back in time) runs once more, alone; a second crash is raised.
    errors = [
        _error(case, runner) if isinstance(error, Exception) else error
        for case, error in zip(cases, errors, strict=True)
    ]
    failures = [_failure(case, error) for case, error in zip(cases, errors, strict=True)]
    for line in failures:
        if line is not None:
            print(line, file=out)
    failed = sum(line is not None for line in failures)
    print(f"{len(cases) - failed} passed, {failed} failed", file=out)
    return len(cases) - failed, failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headwater transcripts",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("files", nargs="+", help="transcript files (YAML)")
    parser.add_argument(
        "--runner",
        choices=["local", "spark"],
        default="local",
        help="local: the deterministic runner; spark: Structured Streaming",
    )
    parser.add_argument("--workers", type=int, default=1, help="documents run at a time (threads)")
    args = parser.parse_args(argv)
    _, failed = run_files(args.files, args.runner, workers=args.workers)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
