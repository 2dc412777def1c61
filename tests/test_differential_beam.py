"""Differential test: headwater's windowing core against Apache Beam's Python SDK.

Seeded random timelines (one to three keys, out-of-order integer event times,
input bundles, late data, watermark advances, clock advances) are each run
through many random windowing configurations (FixedWindows, SlidingWindows,
Sessions, GlobalWindows x a trigger grammar x discarding/accumulating x
OUTPUT_AT_EOW/EARLIEST/LATEST x allowed lateness), through headwater's local
runner and through Beam's streaming BundleBasedDirectRunner
(``beam_oracle.run_beam``: one Beam pipeline per timeline, one branch per
configuration). Every pane of every step is compared: key, window, values, pane
index, first, timestamp, timing, nonspeculative index and final.

Beam Python differs from docs/semantics.md in documented ways: docs/divergences.md,
one section per divergence, ``D1`` ... ``D16``. The test does not ignore a field
wholesale: it checks each headwater pane against the rules of docs/semantics.md
that the translation relies on (rule 1 timing and nonspeculative index, rule 4
final, pane index, values of the pane's key and window, no element lost), then
derives the pane Beam must emit, using a precise predicate per divergence:

* D1: a final pane headwater emits when it collects a window may be missing
  from Beam only if Beam never emitted its new data (values are unique per
  element); sessions that merge, in Beam, with a window headwater collected
  are not compared from that step on (such configurations are not "fully
  compared").
* D2: Beam's ``final`` is "the trigger finished".
* D3: watermarks are at x.5 s, everything else at whole seconds: no ties.
* D4/D5/D6: a probe wrapped around Beam's streaming GroupAlsoByWindow evaluator
  records the output watermark Beam hands to the trigger driver; from it the
  test derives the timing and nonspeculative index of every Beam pane fired by
  elements, and the windows whose timestamp holds differ.
* D8: processing-time triggers only in forms, and on timelines, where Beam
  otherwise agrees (see the docs); a pane fired by a processing-time timer is
  EARLY in Beam.
* D13: an AfterWatermark after the first child of an AfterEach has no timer in
  Beam if no element arrives while it is active.
* D15: the global window's end-of-window timestamp compares as "EOW".
* D16: Beam ignores a session merged with a finished one.

A configuration is "fully compared" when no key was left out; at least
MIN_FULLY_COMPARED must be. ``DIFFERENTIAL_SEED`` / ``DIFFERENTIAL_TIMELINES``
(environment) change the seed and the number of timelines (fewer than the
default fail the count); ``python tests/test_differential_beam.py`` prints
statistics and every failure.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from headwater.model.time import GLOBAL_WINDOW_END
from headwater.testing import beam_oracle
from headwater.testing.transcripts import Document, local_runner, timeline

pytestmark = [pytest.mark.beam, pytest.mark.slow]

DIVERGENCES_DOC = Path(__file__).resolve().parents[1] / "docs" / "divergences.md"
# The sections of DIVERGENCES_DOC (names: beam_oracle.KNOWN_DIVERGENCES, plus two).
DIVERGENCES = {
    "D1": "no_gc",
    "D2": "not_final",
    "D3": "drop_boundary",
    "D4": "late_first_pane",
    "D5": "output_watermark_timing",
    "D6": "eow_late_hold",
    "D7": "early_hold_kept",
    "D8": "processing_time_as_event_time",
    "D9": "parallel_processing_time",
    "D10": "reset_keeps_timers",
    "D11": "session_timers",
    "D12": "clock_batching",
    "D13": "watermark_timer_on_element",
    "D14": "silent_drops",
    "D15": "global_timestamp",
    "D16": "session_merge_finished",
}

SEED = int(os.environ.get("DIFFERENTIAL_SEED", "20250711"))
TIMELINES = int(os.environ.get("DIFFERENTIAL_TIMELINES", "20"))
CONFIGS_PER_TIMELINE = 24
MIN_FULLY_COMPARED = 300
INF = float("inf")

KEYS = ("a", "b", "c")
T0 = 1000  # event times start about here; processing time stays far below (D8)
MAX_DELAY = 5  # longest AfterProcessingTime delay, seconds


# --------------------------------------------------------------------------
# Random timelines and configurations
# --------------------------------------------------------------------------


def make_timeline(rng: random.Random, processing_time: bool) -> list[dict]:
    """Input bundles, watermarks at x.5 s, small clock steps; ends at .inf.

    ``processing_time``: every watermark step is preceded by a clock step
    that fires every processing-time timer set so far (delays are at most
    MAX_DELAY), so no window is collected, and no ON_TIME pane fired, while a
    processing-time timer is pending (D1, D10).
    """
    events: list[dict] = []
    keys = KEYS[: rng.choice((1, 2, 3, 3))]
    wm = float(T0 - 3) + 0.5
    clock = 0
    serial = 0
    n_events = rng.randint(8, 16)
    late_p = rng.choice((0.1, 0.3, 0.5))

    def watermark(to: float) -> None:
        nonlocal clock
        if processing_time:
            clock += MAX_DELAY + 1
            events.append({"clock": clock})
        events.append({"watermark": to})

    for _ in range(n_events):
        r = rng.random()
        if r < 0.55:
            items = []
            for _ in range(rng.randint(1, 4)):
                if rng.random() < late_p:
                    t = int(wm) - rng.randint(0, 12)
                else:
                    t = int(wm) + rng.randint(1, 10)
                serial += 1
                items.append({"t": t, "v": t * 1000 + serial, "k": rng.choice(keys)})
            events.append({"input": items})
        elif r < 0.85:
            wm = float(int(wm) + rng.randint(1, 8)) + 0.5
            watermark(wm)
        else:
            clock += rng.randint(1, MAX_DELAY)
            events.append({"clock": clock})
    if rng.random() < 0.5:  # late data, then the end of input
        serial += 1
        t = int(wm) - rng.randint(0, 6)
        events.append({"input": [{"t": t, "v": t * 1000 + serial, "k": rng.choice(keys)}]})
    watermark(INF)
    assert clock * 1000 < T0 * 1000 - 20_000  # clock stays below every window (D8)
    return events


def _count(rng: random.Random) -> str:
    return f"AfterCount({rng.randint(1, 3)})"


def make_trigger(rng: random.Random) -> str:
    kind = rng.choice(
        (
            "Default",
            "Default",
            "AfterWatermark",
            "AfterWatermark",
            "AfterWatermark",
            "AfterCount",
            "Repeatedly",
            "Repeatedly",
            "AfterEach",
            "AfterAny",
            "AfterAll",
            "OrFinally",
            "Never",
            "RepeatedlyComposite",
            "WatermarkComposite",
        )
    )
    if kind == "Default":
        return "Default"
    if kind == "AfterWatermark":
        parts = []
        if rng.random() < 0.6:
            parts.append(f"early={_count(rng)}")
        if rng.random() < 0.6:
            parts.append(f"late={_count(rng)}")
        return f"AfterWatermark({', '.join(parts)})"
    if kind == "AfterCount":
        return _count(rng)
    if kind == "Repeatedly":
        return f"Repeatedly({_count(rng)})"
    if kind == "AfterEach":
        subs = ", ".join(_count(rng) for _ in range(rng.randint(2, 3)))
        return f"AfterEach({subs})" if rng.random() < 0.5 else f"Repeatedly(AfterEach({subs}))"
    if kind in ("AfterAny", "AfterAll"):
        subs = ", ".join(_count(rng) for _ in range(2))
        return f"{kind}({subs})"
    if kind == "OrFinally":
        return f"OrFinally(Repeatedly({_count(rng)}), AfterCount({rng.randint(2, 5)}))"
    if kind == "Never":
        return "Never"
    if kind == "RepeatedlyComposite":
        inner = rng.choice(("AfterAny", "AfterAll"))
        return f"Repeatedly({inner}({_count(rng)}, {_count(rng)}))"
    # Watermark triggers inside composites.
    return rng.choice(
        (
            f"AfterAny({_count(rng)}, AfterWatermark())",
            f"AfterEach({_count(rng)}, AfterWatermark())",
            f"AfterEach(AfterWatermark(), {_count(rng)})",
            f"OrFinally(Repeatedly({_count(rng)}), AfterWatermark())",
        )
    )


def make_window_fn(rng: random.Random) -> str:
    kind = rng.choice(("Fixed", "Fixed", "Sliding", "Sessions", "Sessions", "Global"))
    if kind == "Fixed":
        size = rng.choice((3, 5, 10))
        offset = rng.randint(0, size - 1) if rng.random() < 0.3 else 0
        return f"FixedWindows({size}, {offset})" if offset else f"FixedWindows({size})"
    if kind == "Sliding":
        size, period = rng.choice(((10, 5), (6, 2), (9, 3), (4, 4), (8, 3)))
        return f"SlidingWindows({size}, {period})"
    if kind == "Sessions":
        return f"Sessions({rng.choice((2, 3, 5))})"
    return "GlobalWindows"


def make_processing_time_trigger(rng: random.Random) -> str:
    """The forms Beam Python handles like docs/semantics.md (not with Sessions:
    D11; AfterProcessingTime under AfterAny/AfterAll/OrFinally: D9)."""
    apt = f"AfterProcessingTime({rng.randint(1, MAX_DELAY)})"
    return rng.choice(
        (
            f"Repeatedly({apt})",
            f"AfterWatermark(early={apt})",
            f"AfterWatermark(early={apt}, late={_count(rng)})",
        )
    )


def make_config(rng: random.Random, processing_time: bool) -> dict:
    window_fn = make_window_fn(rng)
    if processing_time and not window_fn.startswith("Sessions") and rng.random() < 0.6:
        trigger = make_processing_time_trigger(rng)
    else:
        trigger = make_trigger(rng)
    return {
        "window_fn": window_fn,
        "trigger_fn": trigger,
        "accumulation_mode": rng.choice(("discarding", "accumulating")),
        "timestamp_combiner": rng.choice(
            ("OUTPUT_AT_EOW", "OUTPUT_AT_EARLIEST", "OUTPUT_AT_LATEST")
        ),
        "allowed_lateness": rng.choice((0, 0, 3, 10)),
    }


def batch(index: int) -> tuple[list[dict], list[dict]]:
    """The timeline and configurations of batch ``index`` (deterministic).
    Odd batches also compare processing-time triggers."""
    rng = random.Random(f"{SEED}/{index}")
    processing_time = index % 2 == 1
    events = make_timeline(rng, processing_time)
    configs = [make_config(rng, processing_time) for _ in range(CONFIGS_PER_TIMELINE)]
    return events, configs


# --------------------------------------------------------------------------
# Beam, with a probe on the GroupByKey's output watermark
# --------------------------------------------------------------------------

_PROBE_LOCK = threading.Lock()


@contextlib.contextmanager
def _output_watermark_probe():
    """Record, for every keyed work item with elements that Beam's streaming
    GroupAlsoByWindow processes, the output and input watermarks it passes to
    the trigger driver (what Beam labels element-fired panes against, D5).

    The record goes into the oracle's ordered sink like a pane of that
    config, so ``run_beam`` tags it with its step; it carries ``probe: True``.
    """
    from apache_beam.runners.direct import transform_evaluator as te

    evaluator = te._StreamingGroupAlsoByWindowEvaluator
    original = evaluator.process_element
    label = re.compile(r"GBK(\d+)/")

    def process_element(self, element):
        kwi = element.value
        if kwi.elements:
            wms = self._evaluation_context._watermark_manager.get_watermarks(
                self._applied_ptransform
            )
            config = int(label.match(self._applied_ptransform.full_label).group(1))
            row = {
                "probe": True,
                "key": self.key_coder.decode(kwi.encoded_key),
                "ow": wms.output_watermark.micros,
                "iw": wms.input_watermark.micros,
            }
            with beam_oracle._SINK_LOCK:
                for run in beam_oracle._SINK.values():
                    run.records.append(("probe", config, row))
        return original(self, element)

    with _PROBE_LOCK:
        evaluator.process_element = process_element
        try:
            yield
        finally:
            evaluator.process_element = original


def run_beam_with_probes(configs, events):
    diagnostics: dict = {}
    with _output_watermark_probe():
        results = beam_oracle.run_beam(
            configs, events, default_key="k", with_steps=True, diagnostics=diagnostics
        )
    out = []
    for rows in results:
        panes = [r for r in rows if not r.get("probe")]
        probes = [r for r in rows if r.get("probe")]
        out.append((panes, probes))
    return out, diagnostics


def run_headwater(config: dict, events: list[dict]) -> tuple[list[list[dict]], list[dict]]:
    """headwater's panes per step, and every element it dropped."""
    doc = Document.parse(dict(config, name="differential", transcript=events))
    steps, _ = timeline(doc.events)
    emissions = local_runner(doc.plan, steps)
    assert len(emissions) == len(steps)
    panes = [em.panes.to_dict("records") for em in emissions]
    dropped = [row for em in emissions for row in em.dropped.to_dict("records")]
    return panes, dropped


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

US = 1000  # microseconds per millisecond
NEG_INF_US = -(2**63)


@dataclass
class Outcome:
    """What comparing one configuration found."""

    problems: list[str] = field(default_factory=list)
    rules: Counter = field(default_factory=Counter)  # divergence -> panes it applied to
    panes: int = 0
    skipped_keys: set = field(default_factory=set)

    @property
    def fully_compared(self) -> bool:
        return not self.problems and not self.skipped_keys


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _window_of_hw(start, end):
    return "global" if end >= GLOBAL_WINDOW_END else (int(start), int(end))


def _end_ms(window) -> int:
    return GLOBAL_WINDOW_END if window == "global" else window[1]


def _beam_max_ms(window) -> int:
    if window == "global":
        from apache_beam.transforms.window import GlobalWindow

        return GlobalWindow().max_timestamp().micros // US
    return window[1] - 1


def _in_window(t_ms: int, window) -> bool:
    return window == "global" or window[0] <= t_ms < window[1]


def _ontime_new(new, element, end: int, gap_ms) -> bool | None:
    """Does a pane's new data include an element that arrived on time (rule 1)?

    An element is on time when the watermark at its arrival was before the end
    of its window then. For fixed, sliding and global windows that is the
    pane's window. A session grows by merges, so its window at arrival lies
    between the element's own window ``[t, t + gap)`` and the pane's window:
    None when those two bounds disagree.
    """
    arrived = [element[v] for v in new if v in element]
    lenient = any(wm < end for _, _, wm in arrived)
    if not gap_ms:
        return lenient
    strict = any(wm < t + gap_ms for _, t, wm in arrived)
    return True if strict else (False if not lenient else None)


def _overlaps(a, b) -> bool:
    if a == "global" or b == "global":
        return a == b
    return a[0] < b[1] and b[0] < a[1]


def _children(node) -> list:
    from apache_beam.transforms import trigger as t

    if isinstance(node, t.AfterWatermark):
        return [x for x in (node.early, node.late) if x is not None]
    if isinstance(node, t.Repeatedly):
        return [node.underlying]
    if isinstance(node, (t._ParallelTriggerFn, t.AfterEach)):
        return list(node.triggers)
    return []


def _watermark_after_each(trig) -> bool:
    """Whether an AfterWatermark/Default is a later (not the first) child of an
    AfterEach: it becomes active only after an earlier child finished (D13)."""
    from apache_beam.transforms import trigger as t

    def has_watermark(node) -> bool:
        if isinstance(node, (t.AfterWatermark, t.DefaultTrigger)):
            return True
        return any(has_watermark(c) for c in _children(node))

    def walk(node) -> bool:
        if isinstance(node, t.AfterEach) and any(has_watermark(c) for c in node.triggers[1:]):
            return True
        return any(walk(c) for c in _children(node))

    return walk(trig)


@dataclass
class _Config:
    """What the comparison needs to know about a configuration."""

    lateness_ms: int
    eow: bool
    earliest: bool
    discarding: bool
    ontime: bool  # the trigger has an ON_TIME pane (Beam: has_ontime_pane)
    never_finishes: bool  # Beam's `final` is "the trigger finished"
    watermark_after_each: bool
    sessions: bool
    gap_ms: int
    window_fn: object  # Beam's WindowFn

    @classmethod
    def of(cls, config: dict) -> _Config:
        from apache_beam.transforms import trigger as t
        from apache_beam.transforms import window as bw

        trig = beam_oracle.parse_trigger(config["trigger_fn"])
        wfn = beam_oracle.parse_window_fn(config["window_fn"])
        hw = Document.parse(dict(config, name="x", transcript=[])).strategy
        ontime = bool(trig.has_ontime_pane())
        # Both hold the watermark across EARLY panes only for these triggers.
        assert ontime == hw.trigger.sets_end_of_window_timer(), config
        sessions = isinstance(wfn, bw.Sessions)
        return cls(
            lateness_ms=round(float(config.get("allowed_lateness") or 0) * 1000),
            eow=config.get("timestamp_combiner", "OUTPUT_AT_EOW") == "OUTPUT_AT_EOW",
            earliest=config.get("timestamp_combiner") == "OUTPUT_AT_EARLIEST",
            discarding=config.get("accumulation_mode") == "discarding",
            ontime=ontime,
            never_finishes=isinstance(trig, (t.DefaultTrigger, t.Repeatedly, t._Never))
            or (isinstance(trig, t.AfterWatermark) and trig.late is not None),
            watermark_after_each=_watermark_after_each(trig),
            sessions=sessions,
            gap_ms=wfn.gap_size.micros // US if sessions else 0,
            window_fn=wfn,
        )

    def windows(self, t_s: int) -> list:
        """The windows (ms) of an element at ``t_s`` seconds; its proto-session."""
        from apache_beam.transforms.window import GlobalWindow, WindowFn

        out = []
        for w in self.window_fn.assign(WindowFn.AssignContext(t_s)):
            if isinstance(w, GlobalWindow):
                out.append("global")
            else:
                out.append((w.start.micros // US, w.end.micros // US))
        return out


class _WindowSet:
    """(key, window) entries; with merging windows an entry also covers the
    windows it was merged into (any overlapping window of the key)."""

    def __init__(self, merging: bool):
        self.merging = merging
        self.entries: set = set()

    def add(self, key, window) -> None:
        self.entries.add((key, window))

    def covers(self, key, window) -> bool:
        if not self.merging:
            return (key, window) in self.entries
        return any(k == key and _overlaps(w, window) for k, w in self.entries)

    def discard(self, key, window) -> None:
        self.entries = {
            (k, w)
            for k, w in self.entries
            if not (k == key and (w == window or (self.merging and _overlaps(w, window))))
        }


def _beam_sessions(events, wm_ms, gap_ms, lateness, beam_by_step) -> tuple[dict, list]:
    """Replay Beam's session windows (never collected; finished ones keep a
    tombstone forever) next to headwater's.

    Returns (key -> first step where an element merges with a session window
    headwater has already collected (D1), [(step, key, window)]: the merged
    windows Beam tombstoned as they include a window whose trigger had
    finished (D16)).
    """
    skip: dict = {}
    rejected = []
    live: dict = defaultdict(dict)  # key -> {window: finished}
    for s, event in enumerate(events):
        ((kind, arg),) = event.items()
        for item in arg if kind == "input" else ():
            k, lo = item["k"], item["t"] * 1000
            hi = lo + gap_ms
            if hi + lateness < wm_ms[s]:
                continue  # dropped by both
            merged = [w for w in live[k] if w[0] < hi and lo < w[1]]
            if any(w[1] + lateness <= wm_ms[s] for w in merged):
                skip.setdefault(k, s)
            finished = any(live[k][w] for w in merged)
            for w in merged:
                del live[k][w]
                lo, hi = min(lo, w[0]), max(hi, w[1])
            live[k][(lo, hi)] = finished
            if finished:
                rejected.append((s, k, (lo, hi)))
        for p in beam_by_step.get(s, ()):
            window = tuple(p["window"])
            if p["final"] and window in live[p["key"]]:
                live[p["key"]][window] = True
    return skip, rejected


def _describe(p: dict | None) -> str:
    keys = ("key", "window", "values", "index", "timestamp", "timing", "nsi", "final")
    return "{" + ", ".join(f"{k}: {p.get(k)!r}" for k in keys if k in p) + "}"


@dataclass
class _Timeline:
    """The input watermark and clock (ms) during each step, each step's kind, and
    each element: what the rules judge a pane by (an element's watermark at
    arrival says whether it was on time)."""

    wm_ms: list[float] = field(default_factory=list)
    clock_ms: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    element: dict = field(default_factory=dict)  # value -> (key, t ms, watermark ms at arrival)

    @classmethod
    def of(cls, events: list[dict]) -> _Timeline:
        line = cls()
        wm, clock = -INF, 0.0
        for event in events:
            ((kind, arg),) = event.items()
            if kind == "watermark":
                wm = max(wm, float(arg) * 1000)
            elif kind == "clock":
                clock = max(clock, float(arg) * 1000)
            elif kind == "input":
                for item in arg:
                    line.element[item["v"]] = (item["k"], item["t"] * 1000, wm)
            line.wm_ms.append(wm)
            line.clock_ms.append(clock)
            line.kinds.append(kind)
        return line


def _output_watermarks(probes: list[dict], n: int) -> dict:
    """Beam's output watermark (microseconds) per (step, key), the lowest its
    probes saw: Beam labels panes fired by elements against it (D5)."""
    ow_us: dict = {}
    for p in probes:
        at = (min(p["step"], n - 1), p["key"])
        ow_us[at] = min(p["ow"], ow_us.get(at, p["ow"]))
    return ow_us


@dataclass
class _Pane:
    """A headwater pane at one step, with what the rules and the translation to
    Beam's pane judge it by."""

    step: int
    kind: str  # the step's: input, watermark or clock
    hw: dict  # key, window, values, index, timestamp ("EOW"), timing, nsi, final
    first: bool  # headwater's is_first
    end: int  # the window's end, ms
    early: bool  # the input watermark is before the window's end
    collected: bool  # the input watermark passed the end plus the allowed lateness
    new: set  # values no earlier pane of the key and window emitted

    @property
    def wk(self) -> tuple:
        return (self.hw["key"], self.hw["window"])


@dataclass
class _Comparison:
    """One configuration's comparison, walked step by step: the counters and
    sets of values that the rules and the divergences depend on, per key and
    window, carried from each step to the next."""

    cfg: _Config
    events: list[dict]
    line: _Timeline
    ow_us: dict  # (step, key) -> Beam's output watermark, microseconds
    beam_by_step: dict  # step -> Beam's panes
    skip_key_from: dict  # key -> first step not compared (D1, sessions)
    rejected: list  # D16: Beam's session windows merged with a finished one
    out: Outcome = field(default_factory=Outcome)
    hw_panes: Counter = field(default_factory=Counter)  # (key, window) -> panes so far
    hw_nonspec: Counter = field(default_factory=Counter)  # (key, window) -> non-EARLY panes
    beam_nonspec: Counter = field(default_factory=Counter)  # Beam's nonspeculative counter
    last_values: dict = field(default_factory=dict)  # (key, window) -> previous pane's values
    hw_emitted: dict = field(default_factory=lambda: defaultdict(set))  # where() -> values
    beam_values: dict = field(default_factory=lambda: defaultdict(set))  # where() -> values
    holds_differ: _WindowSet = field(init=False)  # D5: Beam's hold is not headwater's
    left_open: _WindowSet = field(init=False)  # D13: Beam has no end-of-window timer

    def __post_init__(self) -> None:
        self.holds_differ = _WindowSet(self.cfg.sessions)
        self.left_open = _WindowSet(self.cfg.sessions)
        # Values Beam emitted per key and window, in the part of the run compared.
        for s, panes in self.beam_by_step.items():
            for p in panes:
                if s < self.skip_key_from.get(p["key"], len(self.events)):
                    window = p["window"] if p["window"] == "global" else tuple(p["window"])
                    self.beam_values[self.where(p["key"], window)].update(p["values"])

    @classmethod
    def of(cls, config: dict, events: list[dict], beam_panes, probes) -> _Comparison:
        cfg = _Config.of(config)
        line = _Timeline.of(events)
        n = len(events)
        beam_by_step: dict = defaultdict(list)
        for p in beam_panes:
            beam_by_step[min(p["step"], n - 1)].append(p)
        skip_key_from: dict = {}
        rejected: list = []
        if cfg.sessions:
            skip_key_from, rejected = _beam_sessions(
                events, line.wm_ms, cfg.gap_ms, cfg.lateness_ms, beam_by_step
            )
        ow_us = _output_watermarks(probes, n)
        return cls(cfg, events, line, ow_us, beam_by_step, skip_key_from, rejected)

    def run(self, hw_steps, hw_dropped) -> Outcome:
        for s in range(len(self.events)):
            if self.line.kinds[s] == "input" and not self.cfg.eow:
                self.hold_elements(s)
            expected = []
            for hp in hw_steps[s]:
                assert not hp["is_retraction"]
                if not self.skipped(_plain(hp["key"]), s):
                    expected.append(self.expect(s, hp))
            self.match(s, expected)
        self.check_nothing_lost(hw_dropped)
        return self.out

    def skipped(self, key, s: int) -> bool:
        if s >= self.skip_key_from.get(key, len(self.events)):
            self.out.skipped_keys.add(key)
            return True
        return False

    def where(self, key, window) -> tuple:
        # Values are unique per element; an element is in one session at a
        # time, but in several sliding windows.
        return (key, None if self.cfg.sessions else window)

    def problem(self, s: int, text: str) -> None:
        self.out.problems.append(f"step {s} ({next(iter(self.events[s]))}): {text}")

    def hold_elements(self, s: int) -> None:
        """Beam holds an element's timestamp if it is >= the output watermark,
        headwater if it is >= the input watermark: mark the windows where the
        two differ."""
        step_wm = self.line.wm_ms[s]
        for item in self.events[s]["input"]:
            ow = self.ow_us.get((s, item["k"]))
            if ow is not None and ow <= item["t"] * 1000 * US < step_wm * US:
                if self.cfg.sessions:
                    w = (item["t"] * 1000, item["t"] * 1000 + self.cfg.gap_ms)
                    self.holds_differ.add(item["k"], w)
                else:
                    for w in self.cfg.windows(item["t"]):
                        self.holds_differ.add(item["k"], w)

    def expect(self, s: int, hp: dict) -> dict:
        """Check a headwater pane against the rules, then the pane Beam must emit."""
        self.out.panes += 1
        pane = self.headwater_pane(s, hp)
        self.check_rules(pane)
        self.check_values(pane)
        return self.beam_pane(pane)

    def headwater_pane(self, s: int, hp: dict) -> _Pane:
        key = _plain(hp["key"])
        window = _window_of_hw(hp["window_start"], hp["window_end"])
        end = _end_ms(window)
        values = sorted(_plain(v) for v in hp["values"])
        ts = int(hp["timestamp"])
        step_wm = self.line.wm_ms[s]
        if window != "global":
            collected = end + self.cfg.lateness_ms <= step_wm
        else:
            collected = step_wm == INF
        hw = {
            "key": key,
            "window": window,
            "values": values,
            "index": int(hp["pane_index"]),
            "timestamp": "EOW" if ts == end - 1 else ts,
            "timing": hp["timing"],
            "nsi": int(hp["nonspeculative_index"]),
            "final": bool(hp["is_last"]),
        }
        new = set(values) - self.hw_emitted[self.where(key, window)]
        first = bool(hp["is_first"])
        return _Pane(s, self.line.kinds[s], hw, first, end, step_wm < end, collected, new)

    def rule_timing(self, p: _Pane) -> str:
        """Rule 1: the first non-EARLY pane is ON_TIME if it is the
        end-of-window firing (a watermark step that passes the end; a
        collection at that step flushes only on-time data, so it is ON_TIME
        too) or if it emits on-time data no pane emitted yet."""
        if p.early:
            return "EARLY"
        if self.hw_nonspec[p.wk] != 0:
            return "LATE"
        wm_ms = self.line.wm_ms
        eow_step = p.kind == "watermark" and (wm_ms[p.step - 1] if p.step else -INF) < p.end
        gap_ms = self.cfg.sessions and self.cfg.gap_ms
        ontime_new = _ontime_new(p.new, self.line.element, p.end, gap_ms)
        if eow_step or ontime_new:
            return "ON_TIME"
        if ontime_new is None:
            # A session element late for its own window at arrival joined a
            # session whose end the watermark had not passed: whether its
            # data counts as on time depends on that session (not tracked).
            return p.hw["timing"] if p.hw["timing"] != "EARLY" else "ON_TIME"
        return "LATE"

    def check_rules(self, p: _Pane) -> None:
        """headwater against the rules the translation relies on: pane index,
        first, timing and nonspeculative index (rule 1), final (rule 4)."""
        wk = p.wk
        rule = {
            "index": self.hw_panes[wk],
            "first": self.hw_panes[wk] == 0,
            "timing": self.rule_timing(p),
            "nsi": -1 if p.early else self.hw_nonspec[wk],
        }
        if p.collected or self.cfg.never_finishes:
            rule["final"] = p.collected
        for f, want in rule.items():
            have = p.first if f == "first" else p.hw[f]
            if have != want:
                self.problem(
                    p.step,
                    f"headwater pane {_describe(p.hw)}: {f} is {have!r}, the rules "
                    f"of docs/semantics.md say {want!r}",
                )
        self.hw_panes[wk] += 1
        self.hw_nonspec[wk] += not p.early

    def check_values(self, p: _Pane) -> None:
        """A pane's values are elements of its key and window (and, discarding,
        not emitted before): the translation matches Beam's panes by them."""
        key, window, values = p.hw["key"], p.hw["window"], p.hw["values"]
        element = self.line.element
        emitted = self.hw_emitted[self.where(key, window)]
        strangers = [
            v
            for v in values
            if element.get(v, (None,))[0] != key or not _in_window(element[v][1], window)
        ]
        repeated = set(values) & emitted if self.cfg.discarding else ()
        if strangers or repeated:
            self.problem(
                p.step,
                f"headwater pane {_describe(p.hw)}: values {strangers} are not "
                f"elements of that key and window, {sorted(repeated)} were emitted "
                "before (discarding)",
            )
        emitted.update(values)

    def beam_pane(self, p: _Pane) -> dict:
        """The pane Beam must emit for headwater's, with the divergences it relies on."""
        hw, wk = p.hw, p.wk
        exp = dict(hw, first=hw["index"] == 0, hw_timestamp=hw["timestamp"])
        timing, tags = self.beam_timing(p)
        counter = self.beam_nonspec[wk]
        exp["timing"] = timing
        if timing == "EARLY":
            exp["nsi"] = counter if counter else -1
            self.beam_nonspec[wk] += 1 if counter else 0
        else:
            exp["nsi"] = counter
            self.beam_nonspec[wk] += 1
        self.beam_holds(p, exp)
        if p.collected:
            exp["final"] = False if self.cfg.never_finishes else None  # D1/D2
            if hw["final"] and self.cfg.never_finishes:
                tags.append("D2")
        self.garbage_collection(p, exp)
        exp["no_timer"] = self.no_timer(p)
        self.last_values[wk] = hw["values"]
        exp["tags"] = [t for t in tags if t]
        return exp

    def beam_timing(self, p: _Pane) -> tuple[str, list]:
        """Beam's timing of the pane, and the divergences that explain it."""
        if p.early:
            return "EARLY", []
        if p.kind == "input":
            # Fired by elements: against the output watermark, never ON_TIME.
            ow = self.ow_us.get((p.step, p.hw["key"]), NEG_INF_US)
            timing = "EARLY" if ow < p.end * US else "LATE"
            # D4: headwater's ON_TIME pane fired by an element carries
            # on-time data no pane emitted yet (rule 1).
            late_tag = "D4" if p.hw["timing"] == "ON_TIME" else None
            return timing, ["D5" if timing == "EARLY" else late_tag]
        if p.kind == "clock":
            # Fired by a processing-time timer: against its time (D8).
            timing = "EARLY" if self.line.clock_ms[p.step] < p.end else "LATE"
            return timing, ["D8" if timing == "EARLY" else None]
        return ("ON_TIME" if self.beam_nonspec[p.wk] == 0 else "LATE"), []

    def beam_holds(self, p: _Pane, exp: dict) -> None:
        """D5: no timestamp to compare where Beam's hold differs; then the holds
        after the pane: Beam keeps a window's hold across a pane fired before
        the output watermark passed its end (triggers with an ON_TIME pane),
        headwater before the input watermark did."""
        key, window = p.wk
        if self.holds_differ.covers(key, window):
            exp["timestamp"] = None  # D5
        beam_keeps = self.cfg.ontime and exp["timing"] == "EARLY"
        hw_keeps = self.cfg.ontime and p.early
        if beam_keeps and not hw_keeps and not self.cfg.eow:
            self.holds_differ.add(key, window)
        elif not beam_keeps:
            self.holds_differ.discard(key, window)

    def garbage_collection(self, p: _Pane, exp: dict) -> None:
        """D1: a pane of garbage collection, with data Beam never emitted."""
        hw = p.hw
        exp["gc_only"] = (
            p.kind == "watermark"
            and hw["final"]
            and p.collected
            and bool(p.new)
            and not (p.new & self.beam_values[self.where(hw["key"], hw["window"])])
        )
        if exp["gc_only"] and not self.cfg.ontime:
            # No Beam pane to compare with: its timestamp by the rules
            # (the hold of the elements not emitted yet that were not late).
            element = self.line.element
            held = [element[v][1] for v in p.new if v in element and element[v][1] >= element[v][2]]
            exp["gc_timestamp"] = "EOW"
            if held and not self.cfg.eow:
                exp["gc_timestamp"] = min(held) if self.cfg.earliest else max(held)

    def no_timer(self, p: _Pane) -> bool:
        """D13: an AfterWatermark that became active (in an AfterEach) after
        the window's last element has no end-of-window timer in Beam."""
        previous = self.last_values.get(p.wk)
        return (
            self.cfg.watermark_after_each
            and p.kind == "watermark"
            and p.hw["timing"] == "ON_TIME"
            and previous is not None
            and p.hw["values"] == ([] if self.cfg.discarding else previous)
        )

    def beam_step(self, s: int) -> list[dict]:
        """Beam's panes of step ``s`` in headwater's terms."""
        got = []
        for bp in self.beam_by_step.get(s, []):
            if self.skipped(bp["key"], s):
                continue
            window = bp["window"] if bp["window"] == "global" else tuple(bp["window"])
            ts = bp["timestamp"]
            got.append(
                {
                    "key": bp["key"],
                    "window": window,
                    "values": list(bp["values"]),
                    "index": bp["index"],
                    "first": bp["first"],
                    "timestamp": "EOW" if ts == _beam_max_ms(window) else ts,
                    "timing": bp["timing"],
                    "nsi": bp["nonspeculative_index"],
                    "final": bp["final"],
                }
            )
        return got

    def match(self, s: int, expected: list[dict]) -> None:
        """Match the panes Beam must emit at step ``s`` with those it did."""
        got = self.beam_step(s)
        for exp in expected:
            ident = (exp["key"], exp["window"], exp["index"])
            match = next((g for g in got if (g["key"], g["window"], g["index"]) == ident), None)
            if match is None:
                self.unmatched(s, exp)
                continue
            got.remove(match)
            self.compare_fields(s, exp, match)
        for g in got:
            if self.left_open.covers(g["key"], g["window"]):
                self.out.rules["D13"] += 1  # the window Beam left open fires on late data
                continue
            self.problem(s, f"Beam pane {_describe(g)} not produced by headwater")

    def unmatched(self, s: int, exp: dict) -> None:
        """A pane Beam did not emit: a known divergence, or a problem."""
        if exp["no_timer"]:
            self.out.rules["D13"] += 1
            self.left_open.add(exp["key"], exp["window"])
        elif any(
            r <= s and k == exp["key"] and _overlaps(w, exp["window"]) for r, k, w in self.rejected
        ):
            self.out.rules["D16"] += 1
        elif exp["gc_only"]:
            self.out.rules["D1"] += 1
            if exp.get("gc_timestamp", exp["hw_timestamp"]) != exp["hw_timestamp"]:
                self.problem(
                    s,
                    f"headwater pane {_describe(exp)} (collected): timestamp "
                    f"should be {exp['gc_timestamp']!r}",
                )
        else:
            self.problem(s, f"headwater pane {_describe(exp)} not produced by Beam")

    def compare_fields(self, s: int, exp: dict, match: dict) -> None:
        diffs = []
        for f in ("values", "first", "timestamp", "timing", "nsi", "final"):
            if exp[f] is None:
                self.out.rules[f"{f} not compared"] += 1
            elif exp[f] != match[f]:
                diffs.append(f"{f}: Beam should say {exp[f]!r}, says {match[f]!r}")
        if diffs:
            self.problem(
                s,
                f"headwater pane {_describe(exp)} differs from Beam's "
                f"{_describe(match)}: " + "; ".join(diffs),
            )
        else:
            self.out.rules.update(exp["tags"])

    def check_nothing_lost(self, hw_dropped) -> None:
        """Rules 3 and 4: every element of every window is emitted or reported
        dropped."""
        dropped = set()
        for row in hw_dropped:
            window = _window_of_hw(row["window_start"], row["window_end"])
            dropped.add((_plain(row["value"]), self.where(_plain(row["key"]), window)))
        for v, (key, t_ms, _) in self.line.element.items():
            if key in self.skip_key_from:
                continue
            for window in [None] if self.cfg.sessions else self.cfg.windows(t_ms // 1000):
                at = (key, window)
                if v not in self.hw_emitted[at] and (v, at) not in dropped:
                    self.out.problems.append(
                        f"element {v} (key {key!r}, t {t_ms / 1000:g}) of window {window} was "
                        "neither emitted nor dropped by headwater"
                    )


def compare(config: dict, events: list[dict], hw_steps, hw_dropped, beam_panes, probes):
    """Compare headwater's panes with Beam's, step by step (see module docstring).

    Every headwater pane is checked against the docs/semantics.md rules that the
    translation to Beam's terms relies on (rule 1 timing and nonspeculative
    index, rule 4 final, pane index, values of the key and window, no element
    lost), then translated into the pane Beam must emit and matched with
    Beam's panes of the same step; every Beam pane must be matched.
    """
    return _Comparison.of(config, events, beam_panes, probes).run(hw_steps, hw_dropped)


# --------------------------------------------------------------------------
# Running batches
# --------------------------------------------------------------------------


@dataclass
class BatchResult:
    index: int
    events: list[dict]
    configs: list[dict]
    outcomes: list[Outcome]
    seconds: float


@cache
def run_batch(index: int) -> BatchResult:
    events, configs = batch(index)
    beam_results, diagnostics = run_beam_with_probes(configs, events)
    outcomes = []
    for config, (panes, probes) in zip(configs, beam_results, strict=True):
        hw_panes, hw_dropped = run_headwater(config, events)
        outcomes.append(compare(config, events, hw_panes, hw_dropped, panes, probes))
    return BatchResult(index, events, configs, outcomes, diagnostics.get("seconds", 0.0))


def _failure_report(result: BatchResult, i: int) -> str:
    import yaml

    config = result.configs[i]
    name = f"differential-{SEED}-{result.index}-{i}"
    doc = dict(config, name=name, transcript=result.events)
    return (
        f"{name} (seed {SEED}, timeline {result.index}, config {i}): {config}\n"
        f"first difference: {result.outcomes[i].problems[0]}\n"
        f"({len(result.outcomes[i].problems)} differences; see {DIVERGENCES_DOC.name})\n"
        f"transcript:\n{yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)}"
    )


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(TIMELINES))
def test_headwater_matches_beam(index):
    result = run_batch(index)
    failures = [_failure_report(result, i) for i, o in enumerate(result.outcomes) if o.problems]
    assert not failures, f"{len(failures)} configs differ from Beam\n" + "\n".join(failures[:3])


def _totals() -> tuple[int, int, int, Counter]:
    configs = fully = panes = 0
    rules: Counter = Counter()
    for b in range(TIMELINES):
        for o in run_batch(b).outcomes:
            configs += 1
            fully += o.fully_compared
            panes += o.panes
            rules.update(o.rules)
    return configs, fully, panes, rules


def test_enough_configurations_compared():
    configs, fully, panes, rules = _totals()
    print(f"{configs} configurations, {fully} fully compared, {panes} headwater panes; {rules}")
    assert set(rules) <= set(DIVERGENCES) | {"timestamp not compared", "final not compared"}
    assert fully >= MIN_FULLY_COMPARED, (
        f"only {fully} of {configs} configurations compared fully (every pane of every key)"
    )


def test_divergences_are_documented():
    text = DIVERGENCES_DOC.read_text()
    for tag, name in DIVERGENCES.items():
        assert f"## {tag}. `{name}`" in text, f"{tag} {name} has no section in {DIVERGENCES_DOC}"
    assert set(beam_oracle.KNOWN_DIVERGENCES) <= set(DIVERGENCES.values())


if __name__ == "__main__":  # pragma: no cover - statistics for humans
    import time

    started = time.perf_counter()
    for b in range(TIMELINES):
        r = run_batch(b)
        for i, o in enumerate(r.outcomes):
            if o.problems:
                print(_failure_report(r, i))
    configs, fully, panes, rules = _totals()
    print(f"{configs} configs, {fully} fully compared, {panes} headwater panes")
    print(dict(rules))
    print(f"{time.perf_counter() - started:.1f} s")
