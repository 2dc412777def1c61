"""Apache Beam as a differential-test oracle for headwater's windowing core.

``run_beam(configs, events)`` replays ONE transcript timeline (``input`` /
``watermark`` / ``clock`` events, see ``docs/transcripts.md``) through ONE Beam
pipeline that has one ``WindowInto -> GroupByKey -> record`` branch per
windowing configuration, and returns, per configuration, the panes Beam
produced, normalized to plain dicts::

    {"key": k, "window": (start_ms, end_ms) | "global", "values": [...sorted],
     "timestamp": ms, "index": i, "nonspeculative_index": j,
     "timing": "EARLY" | "ON_TIME" | "LATE" | "UNKNOWN",
     "first": bool, "final": bool, "step": event index | len(events) | None}

The pipeline mirrors how Beam runs its own transcripts
(``apache_beam/transforms/trigger_test.py``, ``BaseTestStreamTranscriptTest``):
a single ``TestStream`` on the streaming ``BundleBasedDirectRunner``, one
``add_elements`` call per ``input`` bundle (timestamped elements keyed by
``k``), ``advance_watermark_to`` per ``watermark``, ``advance_processing_time``
per ``clock`` (the transcript gives absolute processing times; the direct
runner's ``TestClock`` starts at 0, so the delta since the previous ``clock``
is used), and ``advance_watermark_to_infinity`` at the end.

``step``: the direct runner executes a ``TestStream`` event only once the
pipeline is quiescent (no bundle in flight, no timer due), so every pane can be
attributed to the timeline event whose processing produced it. After every
timeline event a marker element is emitted on a separate ``TestStream`` output
and recorded in the same (ordered) sink as the panes; a pane's ``step`` is the
number of markers recorded before it, i.e. the index of the event after which
it was observed. Panes produced by the final ``advance_watermark_to_infinity``
get ``step == len(events)``.

The run ends as soon as that final marker is recorded: Beam Python pipelines
often never terminate on their own here (a watermark hold that is never
released makes the direct runner report a "pipeline stall"; a pending
processing-time timer makes it spin), which ``diagnostics`` reports.

Beam-only; headwater itself never imports this module (apache-beam is a test
extra). Known Beam Python behaviours that differ from headwater's documented
semantics are listed in ``KNOWN_DIVERGENCES``; ``beam_divergences(config)``
says which of them a config can run into; ``beam_supported(config)`` whether
Beam can express it at all. ``python -m headwater.testing.beam_oracle
FILE.yaml ...`` runs transcript documents through Beam and prints where Beam
disagrees with their ``expect`` entries (``check_transcript``).

Cost (2 cores, Beam 2.77): about 0.1 s for one config, 1.4-1.7 s for 30
configs and 10 events, roughly linear in the number of configs (pipeline
construction and the runner's per-transform bookkeeping dominate).
"""

from __future__ import annotations

import ast
import logging
import math
import threading
import uuid
from typing import Any

try:  # apache-beam is a test extra; the module imports without it.
    # Importing Beam logs an "apitools not found" warning on the root logger.
    _previous_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        import apache_beam as _beam
    finally:
        logging.disable(_previous_disable)
except ImportError:  # pragma: no cover
    _beam = None

__all__ = [
    "KNOWN_DIVERGENCES",
    "BeamOracleError",
    "UnsupportedConfig",
    "beam_divergences",
    "check_transcript",
    "pane_in_transcript_terms",
    "transcript_parts",
    "beam_supported",
    "beam_unsupported_reason",
    "parse_trigger",
    "parse_window_fn",
    "run_beam",
]

# Beam Python 2.77 behaviours (trigger.GeneralTriggerDriver under the streaming
# BundleBasedDirectRunner) that differ from the semantics docs/semantics.md pins
# down. Each was reproduced with this oracle; tests/test_beam_oracle.py pins the
# most important ones so that a Beam upgrade that changes them is noticed.
# ``beam_divergences(config)`` says which of them a config can run into.
KNOWN_DIVERGENCES: dict[str, str] = {
    "no_gc": (
        "No garbage collection: Beam Python never acts when the watermark passes "
        "end of window + allowed lateness. Data buffered under a trigger that has "
        "not fired (Never, AfterCount, AfterProcessingTime, the rest of a "
        "Repeatedly(AfterCount(n))) is never emitted, not even at the end of "
        "input; `final` is true only when the trigger itself finishes. "
        "(docs/semantics.md rule 4 emits a final pane at GC.)"
    ),
    "not_final": (
        "Default() never finishes, so its ON_TIME pane has final=false even with "
        "allowed_lateness 0; likewise the ON_TIME pane of AfterWatermark(late=...). "
        "AfterWatermark() without late= does finish: ON_TIME pane final=true, and "
        "later data for that window is ignored even within the allowed lateness."
    ),
    "drop_boundary": (
        "An element is dropped only when the watermark is strictly greater than "
        "window end + allowed lateness (rule 3 drops at >=): an element arriving "
        "when the watermark equals end + lateness is kept and fires a pane."
    ),
    "late_first_pane": (
        "A pane fired by an element is never ON_TIME, even when it is the "
        "window's first non-EARLY pane and emits data that arrived on time and "
        "that no pane had emitted yet (an AfterCount completed by a late "
        "element): LATE with nonspeculative_index 0 where rule 1 says ON_TIME. "
        "(A pane whose new data all arrived late is LATE in both.) With "
        "OUTPUT_AT_EOW the on-time data holds the output watermark, so Beam "
        "says EARLY instead (output_watermark_timing)."
    ),
    "output_watermark_timing": (
        "Panes fired by elements are classified EARLY/LATE against the "
        "GroupByKey's OUTPUT watermark, not its input watermark. The output "
        "watermark is held back by the watermark holds of data not emitted yet "
        "(in this or any other window of the key; holds are never garbage "
        "collected) and can even move backwards in the direct runner. So a pane "
        "fired after the watermark passed the end of its window can come out "
        "as timing EARLY with nonspeculative_index >= 0: e.g. Repeatedly(AfterCount(3)) "
        "when the window still holds unfired data, sliding windows with "
        "OUTPUT_AT_EARLIEST, sessions, late data under OUTPUT_AT_EOW."
    ),
    "eow_late_hold": (
        "With OUTPUT_AT_EOW every late element adds a watermark hold at its "
        "window's max timestamp (the EOW combiner ignores the 'late elements are "
        "not held' filter). If the trigger does not fire at once (e.g. late=AfterCount(2)) "
        "the output watermark regresses (later panes of that window: timing EARLY) "
        "and the hold is never released: the pipeline stalls after the end of "
        "input (diagnostics['stalled'])."
    ),
    "early_hold_kept": (
        "Triggers with an ON_TIME pane (Default, AfterWatermark) keep the "
        "watermark hold across EARLY panes: with OUTPUT_AT_EARLIEST/LATEST a later "
        "pane's timestamp still accounts for elements already emitted (even in "
        "discarding mode), and the ON_TIME pane (even an empty one) carries that "
        "timestamp instead of the end of window."
    ),
    "processing_time_as_event_time": (
        "Processing-time timer firings are evaluated with the timer's processing "
        "time in place of the watermark: AfterWatermark treats a processing time "
        ">= window end as 'watermark passed' (an early=AfterProcessingTime firing "
        "then becomes the non-speculative pane and, without late=, finishes the "
        "window: later data is ignored), and the pane's timing is LATE when the "
        "timer's processing time >= window end, else EARLY, whatever the "
        "watermark. Under TestStream processing time starts at 0, so this "
        "depends on how clock values compare with event times."
    ),
    "parallel_processing_time": (
        "AfterAny/AfterAll/OrFinally re-check their subtriggers in the watermark "
        "domain when firing, so an AfterProcessingTime subtrigger that caused a "
        "firing never counts as fired: AfterAny(AfterProcessingTime(d), ...) and "
        "OrFinally(..., AfterProcessingTime(d)) do not finish then, and that "
        "AfterProcessingTime never re-arms. An AfterProcessingTime inside AfterAll "
        "is satisfied only at the moment its timer fires: AfterAll(AfterCount(2), "
        "AfterProcessingTime(10)) never fires if the count completes after the "
        "timer. AfterProcessingTime.should_fire is true for any processing-time "
        "timer of the window."
    ),
    "reset_keeps_timers": (
        "Resetting a trigger (Repeatedly after each firing, AfterWatermark at its "
        "ON_TIME firing) clears AfterProcessingTime's state but not its pending "
        "timer, which still fires later: an extra pane (empty in discarding mode, "
        "a repeat in accumulating mode), e.g. Repeatedly(AfterAny(AfterCount(3), "
        "AfterProcessingTime(10))) after a count firing, or "
        "AfterWatermark(early=AfterProcessingTime(d), late=...) after the ON_TIME pane."
    ),
    "session_timers": (
        "Merging session windows keeps every merged window's processing-time "
        "timer; each fires, giving duplicate (accumulating) or empty (discarding) "
        "panes (rule 5: the earliest pending timer wins)."
    ),
    "clock_batching": (
        "All processing-time timers due at a clock step fire in one bundle, "
        "ordered by timestamp, with the trigger's current time = the clock step's "
        "time (not each timer's own time)."
    ),
    "silent_drops": (
        "Dropped late elements and elements for a window whose trigger finished "
        "are ignored without any count."
    ),
    "global_timestamp": (
        "GlobalWindows: the end-of-window timestamp is GlobalWindow.max_timestamp() "
        "= 9223371950454773 ms; the window is reported as 'global'."
    ),
}


class BeamOracleError(RuntimeError):
    """The Beam pipeline failed or did not finish."""


class UnsupportedConfig(ValueError):
    """The configuration cannot be expressed in Beam Python."""


# --------------------------------------------------------------------------
# Safe parsing of the transcript expression grammar
# --------------------------------------------------------------------------


def _safe_eval(expr: str, names: dict[str, Any]) -> Any:
    """Evaluate ``Name``, ``Name(args, kw=args)``, numbers and lists only.

    Bare names that are classes/factories are called without arguments
    (the transcript grammar lets an empty ``()`` be omitted).
    """
    try:
        tree = ast.parse(str(expr).strip(), mode="eval")
    except SyntaxError as e:
        raise UnsupportedConfig(f"cannot parse {expr!r}: {e}") from None

    def ev(node: ast.AST, call_bare: bool = True) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            if isinstance(node.value, bool):
                raise UnsupportedConfig(f"unexpected boolean in {expr!r}")
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            if not isinstance(v, (int, float)):
                raise UnsupportedConfig(f"bad operand in {expr!r}")
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise UnsupportedConfig(f"unknown name {node.id!r} in {expr!r}")
            fn = names[node.id]
            return fn() if call_bare and callable(fn) else fn
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise UnsupportedConfig(f"unsupported call in {expr!r}")
            fn = ev(node.func, call_bare=False)
            args = [ev(a) for a in node.args]
            kwargs = {}
            for kw in node.keywords:
                if kw.arg is None:
                    raise UnsupportedConfig(f"**kwargs not allowed in {expr!r}")
                kwargs[kw.arg] = ev(kw.value)
            try:
                return fn(*args, **kwargs)
            except UnsupportedConfig:
                raise
            except (TypeError, ValueError) as e:
                raise UnsupportedConfig(f"bad arguments in {expr!r}: {e}") from None
        raise UnsupportedConfig(f"unsupported syntax {ast.dump(node)} in {expr!r}")

    return ev(tree.body)


def _window_names() -> dict[str, Any]:
    from apache_beam.transforms import window as w

    return {
        "GlobalWindows": w.GlobalWindows,
        "FixedWindows": w.FixedWindows,
        "SlidingWindows": w.SlidingWindows,
        "Sessions": w.Sessions,
    }


def _trigger_names() -> dict[str, Any]:
    from apache_beam.transforms import trigger as t

    def after_processing_time(delay=None, period=None, offset=None):
        if period is not None or offset is not None:
            raise UnsupportedConfig(
                "AfterProcessingTime(period=, offset=) (aligned processing time) "
                "does not exist in Beam Python"
            )
        return t.AfterProcessingTime(0 if delay is None else delay)

    def after_watermark(early=None, late=None):
        return t.AfterWatermark(early=early, late=late)

    def or_finally(main, until):
        return t.OrFinally(main, until)

    return {
        "Default": t.DefaultTrigger,
        "DefaultTrigger": t.DefaultTrigger,
        "AfterWatermark": after_watermark,
        "AfterCount": t.AfterCount,
        "AfterProcessingTime": after_processing_time,
        "Repeatedly": t.Repeatedly,
        "AfterEach": t.AfterEach,
        "AfterAny": t.AfterAny,
        "AfterAll": t.AfterAll,
        "OrFinally": or_finally,
        "Never": t._Never,
        "Always": t.Always,
    }


def parse_window_fn(expr: str | None):
    """Transcript ``window_fn`` string -> Beam WindowFn."""
    return _safe_eval(expr or "GlobalWindows", _window_names())


def parse_trigger(expr: str | None):
    """Transcript ``trigger_fn`` string -> Beam TriggerFn."""
    from apache_beam.transforms.trigger import TriggerFn

    trig = _safe_eval(expr or "Default", _trigger_names())
    if not isinstance(trig, TriggerFn):
        raise UnsupportedConfig(f"{expr!r} is not a trigger")
    return trig


_ACCUMULATION = {"discarding": "DISCARDING", "accumulating": "ACCUMULATING"}
_COMBINERS = ("OUTPUT_AT_EOW", "OUTPUT_AT_EARLIEST", "OUTPUT_AT_LATEST")


def _windowing_args(config: dict) -> dict[str, Any]:
    """The WindowInto arguments for one config (raises UnsupportedConfig)."""
    from apache_beam.transforms.trigger import AccumulationMode
    from apache_beam.transforms.window import TimestampCombiner

    if config.get("combine_fn") not in (None, "list"):
        raise UnsupportedConfig("combine_fn: the oracle's panes carry lists of values")
    mode = str(config.get("accumulation_mode") or "accumulating").lower()
    if mode not in _ACCUMULATION:
        raise UnsupportedConfig(f"accumulation_mode {mode!r} does not exist in Beam")
    tc = str(config.get("timestamp_combiner") or "OUTPUT_AT_EOW").upper()
    if tc not in _COMBINERS:
        raise UnsupportedConfig(f"timestamp_combiner {tc!r} is not supported by the oracle")
    lateness = config.get("allowed_lateness") or 0
    if not isinstance(lateness, (int, float)) or lateness < 0 or math.isinf(lateness):
        raise UnsupportedConfig(f"allowed_lateness {lateness!r}")
    return {
        "windowfn": parse_window_fn(config.get("window_fn")),
        "trigger": parse_trigger(config.get("trigger_fn")),
        "accumulation_mode": getattr(AccumulationMode, _ACCUMULATION[mode]),
        "timestamp_combiner": getattr(TimestampCombiner, tc),
        "allowed_lateness": lateness,
    }


def beam_unsupported_reason(config: dict) -> str | None:
    """None if ``config`` is expressible in Beam Python, else why not."""
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        return "apache_beam is not installed"
    try:
        _windowing_args(config)
    except UnsupportedConfig as e:
        return str(e)
    return None


def beam_supported(config: dict) -> bool:
    """Whether ``config`` is expressible in Beam Python (see beam_unsupported_reason)."""
    return beam_unsupported_reason(config) is None


def beam_divergences(config: dict) -> set[str]:
    """The KNOWN_DIVERGENCES a (Beam-supported) config can run into.

    A static over-approximation from the config alone: whether a divergence
    actually shows depends on the timeline (late data, clock values, ...). The
    processing-time, hold and finishing ones are specific to the config; the
    late-data ones apply to every config, since any timeline with late data
    (even at the drop boundary) can show them.
    """
    from apache_beam.transforms import trigger as t
    from apache_beam.transforms import window as bw

    w = _windowing_args(config)
    trig, wfn = w["trigger"], w["windowfn"]
    # Late data reaches every config (at least at the drop boundary), and with
    # it these three.
    found = {"silent_drops", "drop_boundary", "output_watermark_timing"}

    def walk(node, parents):
        yield node, parents
        subs = []
        if isinstance(node, t.AfterWatermark):
            subs = [x for x in (node.early, node.late) if x is not None]
        elif isinstance(node, t.Repeatedly):
            subs = [node.underlying]
        elif isinstance(node, (t._ParallelTriggerFn, t.AfterEach)):
            subs = list(node.triggers)
        for sub in subs:
            yield from walk(sub, parents + (node,))

    nodes = list(walk(trig, ()))
    has_ontime = bool(trig.has_ontime_pane())
    uses_watermark = any(isinstance(n, (t.AfterWatermark, t.DefaultTrigger)) for n, _ in nodes)
    apts = [(n, ps) for n, ps in nodes if isinstance(n, t.AfterProcessingTime)]
    finishes_at_eow = isinstance(trig, t.AfterWatermark) and trig.late is None

    if not finishes_at_eow:
        found.add("no_gc")
    if uses_watermark:
        found.add("not_final")
    tc = str(config.get("timestamp_combiner") or "OUTPUT_AT_EOW").upper()
    if tc == "OUTPUT_AT_EOW":
        # Late data is possible for every config (drop_boundary), so is this.
        found.add("eow_late_hold")
    if tc != "OUTPUT_AT_EOW" and has_ontime:
        found.add("early_hold_kept")
    if tc != "OUTPUT_AT_EOW" and not isinstance(trig, (t.AfterWatermark, t.DefaultTrigger)):
        # On-time data can outlive the end of the window (no end-of-window
        # firing emits it) and, not held, go out in an element-fired pane.
        found.add("late_first_pane")
    if apts:
        found.update({"processing_time_as_event_time", "clock_batching"})
        if any(any(isinstance(p, t._ParallelTriggerFn) for p in ps) for _, ps in apts):
            found.add("parallel_processing_time")
        if isinstance(wfn, bw.Sessions):
            found.add("session_timers")
        bare = trig.underlying if isinstance(trig, t.Repeatedly) else trig
        if not isinstance(bare, t.AfterProcessingTime):
            found.add("reset_keeps_timers")
    if isinstance(wfn, bw.GlobalWindows):
        found.add("global_timestamp")
    return found


# --------------------------------------------------------------------------
# Recording sink (the direct runner executes DoFns in this process)
# --------------------------------------------------------------------------


class _Run:
    """What one run_beam call collects: panes and markers, in arrival order."""

    def __init__(self, final_marker: int):
        self.records: list[tuple] = []
        self.final_marker = final_marker
        self.finished = threading.Event()  # final marker seen, or pipeline ended


_SINK: dict[str, _Run] = {}
_SINK_LOCK = threading.Lock()
# The direct runner keeps the TestStream's event iterator in a class attribute
# (_TestStreamEvaluator.event_stream): two pipelines must never run at once.
_RUN_LOCK = threading.Lock()

_TIMING_NAMES = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}


def _ms(ts) -> int:
    """A Beam Timestamp -> integer milliseconds (floored)."""
    return ts.micros // 1000


def _sorted_values(values) -> list:
    vals = list(values)
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=repr)


if _beam is not None:
    from apache_beam.transforms.window import GlobalWindow as _GlobalWindow

    class _RecordPane(_beam.DoFn):
        """Records each pane (normalized) in the module-level sink."""

        def __init__(self, run_id: str, config_index: int):
            self.run_id = run_id
            self.config_index = config_index

        def process(
            self,
            element,
            window=_beam.DoFn.WindowParam,
            timestamp=_beam.DoFn.TimestampParam,
            pane=_beam.DoFn.PaneInfoParam,
        ):
            key, values = element
            if isinstance(window, _GlobalWindow):
                win = "global"
            else:
                win = (_ms(window.start), _ms(window.end))
            timing = getattr(pane.timing, "value", pane.timing)
            row = {
                "key": key,
                "window": win,
                "values": _sorted_values(values),
                "timestamp": _ms(timestamp),
                "index": pane.index,
                "nonspeculative_index": pane.nonspeculative_index,
                "timing": _TIMING_NAMES.get(timing, str(timing)),
                "first": bool(pane.is_first),
                "final": bool(pane.is_last),
            }
            with _SINK_LOCK:
                run = _SINK.get(self.run_id)
                if run is not None:
                    run.records.append(("pane", self.config_index, row))

    class _RecordMarker(_beam.DoFn):
        """Records the step markers in the same sink as the panes."""

        def __init__(self, run_id: str):
            self.run_id = run_id

        def process(self, element):
            with _SINK_LOCK:
                run = _SINK.get(self.run_id)
                if run is not None:
                    run.records.append(("marker", element, None))
                    if element == run.final_marker:
                        run.finished.set()


# --------------------------------------------------------------------------
# Timeline -> TestStream
# --------------------------------------------------------------------------

_MARKER_TAG = "headwater_step_marker"


def _parse_time(t) -> float:
    if isinstance(t, str):
        s = t.strip().lower()
        if s in (".inf", "inf", "+inf", "infinity"):
            return math.inf
        return float(s)
    return float(t)


def _normalize_item(item, default_key):
    if isinstance(item, dict):
        t = item["t"]
        return item.get("k", default_key), item.get("v", t), t
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return default_key, item, item
    raise ValueError(f"bad input item {item!r}")


def _build_test_stream(events: list[dict], default_key, with_markers: bool):
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    ts = TestStream()
    watermark = -math.inf
    clock = 0.0
    reached_inf = False
    for i, event in enumerate(events):
        if len(event) != 1:
            raise ValueError(f"event {i} must have exactly one key: {event!r}")
        ((kind, param),) = event.items()
        if kind == "input":
            items = [_normalize_item(it, default_key) for it in (param or [])]
            if items and not reached_inf:
                ts.add_elements([TimestampedValue((k, v), t) for k, v, t in items])
        elif kind == "watermark":
            wm = _parse_time(param)
            if wm > watermark and not reached_inf:
                if math.isinf(wm):
                    ts.advance_watermark_to_infinity()
                    reached_inf = True
                else:
                    ts.advance_watermark_to(wm)
                watermark = wm
        elif kind == "clock":
            c = _parse_time(param)
            if c > clock:
                ts.advance_processing_time(c - clock)
                clock = c
        elif kind in ("expect", "state"):
            raise ValueError(f"event {i}: {kind!r} events must be stripped before run_beam")
        else:
            raise ValueError(f"event {i}: unknown event {kind!r}")
        if with_markers:
            ts.add_elements([i], tag=_MARKER_TAG)
    if not reached_inf:
        ts.advance_watermark_to_infinity()
    # The final marker: everything the end of input caused has been recorded
    # once it arrives (the runner drains the pipeline between events).
    ts.add_elements([len(events)], tag=_MARKER_TAG)
    return ts


# --------------------------------------------------------------------------
# run_beam
# --------------------------------------------------------------------------


def _quiet_beam_logging() -> None:
    for name in ("apache_beam", "apache_beam.runners", "apache_beam.transforms.trigger"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run_beam(
    configs: list[dict],
    events: list[dict],
    *,
    default_key=None,
    with_steps: bool = True,
    timeout: float = 300.0,
    diagnostics: dict | None = None,
) -> list[list[dict]]:
    """Run one timeline through Beam for every config; return each config's panes.

    ``configs``: dicts with the transcript keys (window_fn, trigger_fn,
    accumulation_mode, timestamp_combiner, allowed_lateness; defaults as in
    docs/semantics.md). Every config must be ``beam_supported`` (else
    UnsupportedConfig is raised before anything runs).

    ``events``: ``input`` / ``watermark`` / ``clock`` events (no ``expect``).
    Input items are ``{t, v, k}`` maps (``v`` defaults to ``t``, ``k`` to
    ``default_key``) or bare timestamps (Beam's form). Times are seconds.

    Returns ``result[i]`` = the panes of ``configs[i]`` in the order Beam
    emitted them (see the module docstring for the pane dict).
    ``with_steps=False`` emits no per-event markers (``step`` is None), which
    saves about one runner cycle per event.

    ``diagnostics``, if given, is filled with ``seconds`` (wall time),
    ``stalled`` (Beam reported a pipeline stall after the end of input: a
    watermark hold it never released, see KNOWN_DIVERGENCES) and
    ``cancelled`` (the pipeline was still spinning after the end of input, on
    processing-time timers that can no longer fire, and was cancelled). Both
    happen only after every event has been processed, so the panes are
    complete either way.
    """
    import time

    import apache_beam as beam
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        StandardOptions,
        TypeOptions,
    )
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    started = time.perf_counter()
    _quiet_beam_logging()
    windowings = []
    for i, cfg in enumerate(configs):
        try:
            windowings.append(_windowing_args(cfg))
        except UnsupportedConfig as e:
            raise UnsupportedConfig(f"config {i}: {e}") from None
    if not configs:
        return []

    run_id = uuid.uuid4().hex
    test_stream = _build_test_stream(events, default_key, with_steps)

    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    options.view_as(TypeOptions).allow_unsafe_triggers = True
    options.view_as(DirectOptions).direct_num_workers = 1

    run = _Run(final_marker=len(events))
    info = {"stalled": False, "cancelled": False}
    with _RUN_LOCK:
        with _SINK_LOCK:
            _SINK[run_id] = run
        try:
            p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
            outputs = p | "TestStream" >> test_stream
            _ = outputs[_MARKER_TAG] | "Markers" >> beam.ParDo(_RecordMarker(run_id))
            data = outputs[None]
            for i, w in enumerate(windowings):
                _ = (
                    data
                    | f"Window{i}"
                    >> beam.WindowInto(
                        w["windowfn"],
                        trigger=w["trigger"],
                        accumulation_mode=w["accumulation_mode"],
                        timestamp_combiner=w["timestamp_combiner"],
                        allowed_lateness=w["allowed_lateness"],
                    )
                    | f"GBK{i}" >> beam.GroupByKey()
                    | f"Record{i}" >> beam.ParDo(_RecordPane(run_id, i))
                )
            _execute(p, run, timeout, info)
        finally:
            with _SINK_LOCK:
                _SINK.pop(run_id, None)

    results: list[list[dict]] = [[] for _ in configs]
    step = 0
    for kind, a, row in run.records:
        if kind == "marker":
            step = a + 1
        else:
            row["step"] = min(step, len(events)) if with_steps else None
            results[a].append(row)
    if diagnostics is not None:
        diagnostics.update(info)
        diagnostics["seconds"] = time.perf_counter() - started
    return results


def _is_stall(error: BaseException) -> bool:
    # Beam 2.77's monitor offers a tuple as the "pipeline stall" exception, so
    # wait_until_finish raises "TypeError: exceptions must derive from
    # BaseException" instead of the intended message.
    text = str(error)
    return "pipeline stall" in text or "exceptions must derive from BaseException" in text


def _execute(pipeline, run: _Run, timeout: float, info: dict) -> None:
    """Run ``pipeline`` until the final marker is recorded (or it fails).

    ``Pipeline.run()`` by default round-trips non-portable pipelines through
    the runner API, which truncates AfterProcessingTime delays to whole
    seconds (``delay_millis // 1000``) and costs time; the pipeline objects
    are run as built (``test_runner_api=False``).
    """
    result = pipeline.run(test_runner_api=False)
    box: dict[str, BaseException] = {}

    def wait():
        try:
            result.wait_until_finish()
        except BaseException as e:  # noqa: BLE001 - inspected by the caller
            box["error"] = e
        finally:
            run.finished.set()

    waiter = threading.Thread(target=wait, name="beam-oracle-wait", daemon=True)
    waiter.start()
    run.finished.wait(timeout)
    with _SINK_LOCK:
        complete = any(r[0] == "marker" and r[1] == run.final_marker for r in run.records)
    if complete:
        # Normally the pipeline ends right after the final marker.
        waiter.join(0.1)
    if waiter.is_alive():
        cancel_pipeline(result)
        waiter.join(5.0)
        if not complete:
            raise BeamOracleError(
                f"Beam pipeline did not reach the end of its input within {timeout}s"
            )
        info["cancelled"] = True
    error = box.get("error")
    if error is not None:
        if complete and _is_stall(error):
            info["stalled"] = True
        else:
            raise BeamOracleError(f"Beam pipeline failed: {error!r}") from error
    elif not complete:
        raise BeamOracleError("Beam pipeline ended without reaching the end of its input")


def cancel_pipeline(result) -> None:
    """Stop a direct-runner pipeline and release the thread in wait_until_finish.

    ``DirectPipelineResult.cancel()`` can block for the workers' 5 s queue
    poll; waking the (single) worker with a no-op task avoids that.
    """
    try:
        from apache_beam.runners.direct.executor import (
            _ExecutorService,
            _ExecutorServiceParallelExecutor,
        )

        inner = result._executor._executor
        service = inner.executor_service
        service.shutdown()
        for _ in service.workers:
            service.queue.put(_ExecutorService.CallableTask())
        for worker in service.workers:
            worker.join(10.0)
        inner.evaluation_context.shutdown()
        # Wake the waiter blocked on the executor's visible-updates queue.
        inner.visible_updates.offer(_ExecutorServiceParallelExecutor._VisibleExecutorUpdate())
    except Exception:  # noqa: BLE001 - internals changed: fall back to the public API
        result.cancel()


# --------------------------------------------------------------------------
# Transcript cross-check: what does Beam say about a transcript document?
#   python -m headwater.testing.beam_oracle tests/transcripts/*.yaml
# --------------------------------------------------------------------------

_CONFIG_KEYS = (
    "window_fn",
    "trigger_fn",
    "accumulation_mode",
    "timestamp_combiner",
    "allowed_lateness",
    "combine_fn",
)


def _mean(values):
    return sum(values) / len(values) if values else None


# What a pane's `value` is for each transcript combine_fn, computed from the
# values Beam grouped (combining is a pure function of the pane's values).
_COMBINE_FNS = {
    "sum": sum,
    "count": len,
    "min": lambda vs: min(vs) if vs else None,
    "max": lambda vs: max(vs) if vs else None,
    "mean": _mean,
    "list": sorted,
}


def transcript_parts(doc: dict) -> tuple[dict, list[dict], dict[int, list[dict]]]:
    """Split a transcript document into (config, events, expects).

    ``expects`` maps the index of the last event before each ``expect`` to the
    panes expected since the previous ``expect``. ``state`` events are dropped.
    """
    config = {k: doc[k] for k in _CONFIG_KEYS if k in doc}
    events: list[dict] = []
    expects: dict[int, list[dict]] = {}
    for entry in doc.get("transcript") or []:
        ((kind, value),) = entry.items()
        if kind == "expect":
            expects.setdefault(len(events) - 1, []).extend(value or [])
        elif kind != "state":
            events.append(entry)
    return config, events, expects


def pane_in_transcript_terms(pane: dict, combine_fn: str | None = None) -> dict:
    """An oracle pane as a transcript expects it: seconds, window [start, end - 1]."""
    window = pane["window"]
    out = {
        "window": window if window == "global" else [window[0] // 1000, (window[1] - 1) // 1000],
        "values": pane["values"],
        "timestamp": pane["timestamp"] // 1000,
        "index": pane["index"],
        "nonspeculative_index": pane["nonspeculative_index"],
        "early": pane["timing"] == "EARLY",
        "late": pane["timing"] == "LATE",
        "timing": pane["timing"],
        "first": pane["first"],
        "final": pane["final"],
        "key": pane["key"],
        "retraction": False,
    }
    if combine_fn is not None:
        out["value"] = _COMBINE_FNS[combine_fn](pane["values"])
    return out


def check_transcript(doc: dict) -> list[str]:
    """Differences between Beam's panes and the document's ``expect`` entries.

    [] means Beam agrees with the transcript. Raises UnsupportedConfig when
    the document is not expressible in Beam. Panes Beam produces only at its
    own final advance to infinity (after the timeline) are not checked.
    """
    config, events, expects = transcript_parts(doc)
    combine_fn = config.pop("combine_fn", None)
    if combine_fn is not None and combine_fn not in _COMBINE_FNS:
        raise UnsupportedConfig(f"combine_fn {combine_fn!r}")
    (panes,) = run_beam([config], events)
    problems = []
    previous = -1
    bounds = sorted(expects)
    if not bounds or bounds[-1] < len(events) - 1:
        bounds.append(len(events) - 1)  # the end of the transcript: nothing more
    for last in bounds:
        got = [
            pane_in_transcript_terms(p, combine_fn) for p in panes if previous < p["step"] <= last
        ]
        missing = []
        for exp in expects.get(last, []):
            for cand in got:
                if all(cand.get(k) == v for k, v in exp.items()):
                    got.remove(cand)
                    break
            else:
                missing.append(exp)
        for exp in missing:
            problems.append(f"after event {last}: expected, not produced by Beam: {exp}")
        for extra in got:
            problems.append(f"after event {last}: produced by Beam, not expected: {extra}")
        previous = last
    return problems


def main(argv: list[str] | None = None) -> int:
    """Report, per transcript document, whether Beam agrees with its expects."""
    import argparse

    import yaml

    parser = argparse.ArgumentParser(
        prog="python -m headwater.testing.beam_oracle",
        description="Run transcript documents through Apache Beam and show where "
        "Beam's panes differ from the expected ones.",
    )
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    counts = {"agree": 0, "differ": 0, "unsupported": 0}
    for path in args.files:
        with open(path) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        for doc in docs:
            name = f"{path}:{doc.get('name', '?')}"
            if "error" in doc:
                continue
            try:
                problems = check_transcript(doc)
            except UnsupportedConfig as e:
                counts["unsupported"] += 1
                print(f"UNSUPPORTED {name}: {e}")
                continue
            if problems:
                counts["differ"] += 1
                print(f"DIFFER {name}")
                for line in problems:
                    print(f"    {line}")
            else:
                counts["agree"] += 1
                print(f"AGREE {name}")
    print(
        f"{counts['agree']} agree with Beam, {counts['differ']} differ, "
        f"{counts['unsupported']} not expressible in Beam"
    )
    return 0


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy: the DoFns are pickled
    # by reference and must find the module's own sink.
    from headwater.testing.beam_oracle import main as _main

    raise SystemExit(_main())
