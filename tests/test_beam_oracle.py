"""The Apache Beam oracle (headwater.testing.beam_oracle) is faithful to Beam.

It replays documents of Beam's own trigger transcript suite
(apache_beam/testing/data/trigger_transcripts.yaml, Apache License 2.0, the
documents below are copied unchanged) and checks the panes against their
`expect` entries the way Beam's TestStream transcript test does, then pins the
Beam behaviours the differential tests must know about (KNOWN_DIVERGENCES), so
that a Beam upgrade that changes one of them is noticed.
"""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("apache_beam")

from headwater.testing import beam_oracle  # noqa: E402
from headwater.testing.beam_oracle import (  # noqa: E402
    UnsupportedConfig,
    beam_divergences,
    beam_supported,
    beam_unsupported_reason,
    run_beam,
)

pytestmark = pytest.mark.beam

# Documents of Beam's trigger_transcripts.yaml (also in
# /work/shared/peer-tests/beam_trigger_transcripts.yaml), unchanged.
BEAM_TRANSCRIPTS = """
name: fixed_default
window_fn: FixedWindows(10)       # Python names/syntax, unless otherwise noted.
trigger_fn: Default               # Same. Empty () may be omitted.
transcript:                       # Ordered list of events.
  - input: [1, 2, 3, 10, 11]      # The elements are the timestamps.
  - watermark: 25
  - expect:                       # Every expected output from the last action.
      - {window: [0, 9], values: [1, 2, 3], index: 0}
      - {window: [10, 19], values: [10, 11]}   # Partial match on attributes OK.

---
name: fixed_default_late_data
window_fn: FixedWindows(10)
trigger_fn: Default
timestamp_combiner: OUTPUT_AT_EOW
allowed_lateness: 100
transcript:
  - input: [1, 2, 3, 10, 11, 25]
  - watermark: 100
  - expect:
      - {window: [0, 9], values: [1, 2, 3], timestamp: 9, final: false}
      - {window: [10, 19], values: [10, 11], timestamp: 19}
      - {window: [20, 29], values: [25], timestamp: 29, late: false}
  - input: [7]
  - expect:
      - {window: [0, 9], values: [1, 2, 3, 7], timestamp: 9, late: true}

---
name: fixed_drop_late_data_after_allowed_lateness
window_fn: FixedWindows(10)
trigger_fn: AfterWatermark(early=AfterCount(3), late=AfterCount(1))
timestamp_combiner: OUTPUT_AT_EOW
allowed_lateness: 20
accumulation_mode: accumulating
transcript:
  - input: [1, 2, 10, 11, 80, 81]
  - watermark: 100
  - expect:
      - {window: [0, 9], values: [1, 2], timestamp: 9}
      - {window: [10, 19], values: [10, 11], timestamp: 19}
      - {window: [80, 89], values: [80, 81], timestamp: 89, late: false}
  - input: [7, 8] # no output
  - input: [17, 18] # no output
  - input: [82]
  - expect:
      - {window: [80, 89], values: [80, 81, 82], timestamp: 89, late: true}

---
name: timestamp_combiner_earliest
window_fn: FixedWindows(10)
trigger_fn: Default
timestamp_combiner: OUTPUT_AT_EARLIEST
transcript:
  - input: [1, 2, 3, 10, 11, 25]
  - watermark: 100
  - expect:
      - {window: [0, 9], values: [1, 2, 3], timestamp: 1}
      - {window: [10, 19], values: [10, 11], timestamp: 10}
      - {window: [20, 29], values: [25], timestamp: 25, late: false}

---
name: timestamp_combiner_latest
window_fn: FixedWindows(10)
trigger_fn: Default
timestamp_combiner: OUTPUT_AT_LATEST
transcript:
  - input: [1, 2, 3, 10, 11, 25]
  - watermark: 100
  - expect:
      - {window: [0, 9], values: [1, 2, 3], timestamp: 3}
      - {window: [10, 19], values: [10, 11], timestamp: 11}
      - {window: [20, 29], values: [25], timestamp: 25, late: false}

---
name: early_late_sessions
broken_on:
  # Watermark regresses, causing what should be late data to not be late.
  - SwitchingDirectRunner
window_fn: Sessions(10)
trigger_fn: AfterWatermark(early=AfterCount(2), late=AfterCount(3))
allowed_lateness: 100
timestamp_combiner: OUTPUT_AT_EOW
transcript:
    - input: [1, 2]
    - expect:
        - {window: [1, 11], values: [1, 2], timestamp: 11, early: true, index: 0}
    - input: [3]    # no output
    - input: [4]
    - expect:
        - {window: [1, 13], values: [1, 2, 3, 4], timestamp: 13, early: true, index: 0}
    - input: [5]
    - watermark: 100
    - expect:
        - {window: [1, 14], values:[1, 2, 3, 4, 5], timestamp: 14,
           index: 0, nonspeculative_index: 0}
    - input: [1]
    - input: [3, 4]
    - expect:
        - {window: [1, 14], values: [1, 1, 2, 3, 3, 4, 4, 5], timestamp: 14,
           final: false, index: 1, nonspeculative_index: 1}

---
name: discarding_early_fixed
window_fn: FixedWindows(10)
trigger_fn: AfterWatermark(early=AfterCount(2))
timestamp_combiner: OUTPUT_AT_EOW
accumulation_mode: discarding
transcript:
- input: [1, 2]
- expect:
  - {window: [0, 9], values: [1, 2], timestamp: 9, early: true, index: 0}
- input: [4]    # no output
- input: [14]   # no output
- input: [5]
- expect:
  - {window: [0, 9], values: [4, 5], timestamp: 9, early: true, index: 1}
- input: [18]
- expect:
  - {window: [10, 19], values: [14, 18], timestamp: 19, early: true, index: 0}
- input: [6]
- watermark: 100
- expect:
  - {window: [0, 9], values: [6], timestamp: 9, early: false, late: false,
     final: true, index: 2, nonspeculative_index: 0}
  - {window: [10, 19], values: [], timestamp: 19, early: false, late: false,
     final: true, index: 1, nonspeculative_index: 0}

---
name: garbage_collection
broken_on:
  - SwitchingDirectRunner  # claims pipeline stall
window_fn: FixedWindows(10)
trigger_fn: AfterCount(2)
timestamp_combiner: OUTPUT_AT_EOW
allowed_lateness: 10
accumulation_mode: discarding
transcript:
  - input: [1, 2, 3, 10, 11, 25]
  - expect:
      - {window: [0, 9], timestamp: 9}
      - {window: [10, 19], timestamp: 19}
  - state:
      present: [[20, 29]]
      absent: [[0, 9]]
      tombstone: [[10, 19]]

---
name: known_late_data_watermark
broken_on:
  - SwitchingDirectRunner  # bad timestamp
window_fn: FixedWindows(10)
trigger_fn: Default
timestamp_combiner: OUTPUT_AT_EARLIEST
transcript:
  - watermark: 5
  - input: [2, 3, 7, 8]
  - watermark: 11
  - expect:
      - {window: [0, 9], values: [2, 3, 7, 8], timestamp: 7}

---
name: known_late_data_no_watermark_hold_possible
broken_on:
  - SwitchingDirectRunner  # bad timestamp
window_fn: FixedWindows(10)
trigger_fn: Default
timestamp_combiner: OUTPUT_AT_EARLIEST
transcript:
  - watermark: 8
  - input: [2, 3, 7]
  - watermark: 11
  - expect:
      - {window: [0, 9], values: [2, 3, 7], timestamp: 9}
"""

DOCS = list(yaml.safe_load_all(BEAM_TRANSCRIPTS))
CONFIG_KEYS = (
    "window_fn",
    "trigger_fn",
    "accumulation_mode",
    "timestamp_combiner",
    "allowed_lateness",
)


def split_transcript(doc):
    """(config, events, {index of the last event before an expect: [expected panes]})."""
    config = {k: doc[k] for k in CONFIG_KEYS if k in doc}
    events, expects = [], {}
    for entry in doc["transcript"]:
        ((kind, value),) = entry.items()
        if kind == "expect":
            expects.setdefault(len(events) - 1, []).extend(value)
        elif kind != "state":
            events.append(entry)
    return config, events, expects


def as_beam_transcript_pane(pane):
    """An oracle pane in the transcript's terms: seconds, window [start, end - 1]."""
    start_ms, end_ms = pane["window"]
    return {
        "window": [start_ms // 1000, (end_ms - 1) // 1000],
        "values": pane["values"],
        "timestamp": pane["timestamp"] // 1000,
        "index": pane["index"],
        "nonspeculative_index": pane["nonspeculative_index"],
        "early": pane["timing"] == "EARLY",
        "late": pane["timing"] == "LATE",
        "final": pane["final"],
    }


def assert_panes_match(actual, expected, context):
    """Multiset, partial-key match (Beam's _windowed_value_info_check, both ways)."""
    remaining = list(actual)
    for exp in expected:
        for cand in remaining:
            if all(cand[k] == v for k, v in exp.items()):
                remaining.remove(cand)
                break
        else:
            raise AssertionError(f"{context}: unmatched expected {exp} in {actual}")
    assert not remaining, f"{context}: unexpected output {remaining}"


def check_doc(doc, panes, n_events, expects):
    # Beam's test checks what each step produced; what the final
    # advance_watermark_to_infinity produces (step == n_events) is not checked.
    previous = -1
    for last, expected in sorted(expects.items()):
        got = [as_beam_transcript_pane(p) for p in panes if previous < p["step"] <= last]
        assert_panes_match(got, expected, f"{doc['name']} after event {last}")
        previous = last
    trailing = [p for p in panes if previous < p["step"] < n_events]
    assert not trailing, f"{doc['name']}: unexpected output {trailing}"


@pytest.mark.parametrize("doc", DOCS, ids=[d["name"] for d in DOCS])
def test_beam_transcripts(doc):
    config, events, expects = split_transcript(doc)
    assert beam_supported(config)
    (panes,) = run_beam([config], events)
    check_doc(doc, panes, len(events), expects)


def test_batched_configs_match_separate_runs():
    """One pipeline with many branches gives each config what a run of its own gives."""
    docs = [
        d
        for d in DOCS
        if d["name"] in ("fixed_default_late_data", "discarding_early_fixed", "early_late_sessions")
    ]
    # One shared timeline: the union of the documents' events, in order.
    events = [e for d in docs for e in split_transcript(d)[1]]
    configs = [split_transcript(d)[0] for d in docs]
    together = run_beam(configs, events)
    for config, panes in zip(configs, together, strict=True):
        (alone,) = run_beam([config], events)
        key = lambda p: (p["step"], p["window"], p["index"])  # noqa: E731
        assert sorted(panes, key=key) == sorted(alone, key=key)


def I(*ts, k="a"):  # noqa: E743 - transcript shorthand
    return {"input": [{"t": t, "v": t, "k": k} for t in ts]}


def W(t):
    return {"watermark": t}


def C(t):
    return {"clock": t}


def brief(panes):
    return [
        (p["step"], p["window"], p["values"], p["timing"], p["index"], p["final"]) for p in panes
    ]


def test_pane_normalization_keys_and_steps():
    events = [
        {"input": [{"t": 1.5, "v": "x", "k": "a"}, {"t": 2, "v": "y", "k": "b"}]},
        W(5),
        {"input": [{"t": 12, "v": "z", "k": "a"}]},
        W(10),
    ]
    configs = [
        {"window_fn": "FixedWindows(10)", "trigger_fn": "Default"},
        {
            "window_fn": "GlobalWindows",
            "trigger_fn": "Repeatedly(AfterCount(1))",
            "accumulation_mode": "discarding",
            "timestamp_combiner": "OUTPUT_AT_EARLIEST",
        },
    ]
    fixed, glob = run_beam(configs, events)
    assert sorted(fixed, key=lambda p: (p["key"], p["window"])) == [
        {
            "key": "a",
            "window": (0, 10000),
            "values": ["x"],
            "timestamp": 9999,
            "index": 0,
            "nonspeculative_index": 0,
            "timing": "ON_TIME",
            "first": True,
            "final": False,
            "step": 3,
        },
        # fired by the end of input (step == len(events))
        {
            "key": "a",
            "window": (10000, 20000),
            "values": ["z"],
            "timestamp": 19999,
            "index": 0,
            "nonspeculative_index": 0,
            "timing": "ON_TIME",
            "first": True,
            "final": False,
            "step": 4,
        },
        {
            "key": "b",
            "window": (0, 10000),
            "values": ["y"],
            "timestamp": 9999,
            "index": 0,
            "nonspeculative_index": 0,
            "timing": "ON_TIME",
            "first": True,
            "final": False,
            "step": 3,
        },
    ]
    assert sorted((p["key"], p["step"], p["values"], p["timestamp"]) for p in glob) == [
        ("a", 0, ["x"], 1500),
        ("a", 2, ["z"], 12000),
        ("b", 0, ["y"], 2000),
    ]
    assert {p["window"] for p in glob} == {"global"}


def test_clock_is_absolute_processing_time():
    config = {
        "window_fn": "FixedWindows(100)",
        "trigger_fn": "Repeatedly(AfterProcessingTime(5))",
        "accumulation_mode": "discarding",
    }
    events = [C(3), I(1), C(7), C(8), I(2), C(12.5), C(13)]
    (panes,) = run_beam([config], events)
    # The first element arrives at processing time 3: its timer is due at 8.
    assert brief(panes) == [
        (3, (0, 100000), [1], "EARLY", 0, False),
        (6, (0, 100000), [2], "EARLY", 1, False),
    ]


def test_supported_configs_and_safe_parsing():
    assert beam_supported({})
    assert beam_supported(
        {
            "window_fn": "SlidingWindows(10, 5, 2)",
            "trigger_fn": "OrFinally(Repeatedly(AfterCount(2)), AfterWatermark())",
            "accumulation_mode": "discarding",
            "timestamp_combiner": "OUTPUT_AT_LATEST",
            "allowed_lateness": 5,
        }
    )
    assert beam_supported(
        {"trigger_fn": "AfterWatermark(early=AfterProcessingTime(0.5), late=Never)"}
    )
    for bad in (
        {"trigger_fn": "AfterProcessingTime(period=10, offset=2)"},
        {"accumulation_mode": "retracting"},
        {"combine_fn": "sum"},
        {"timestamp_combiner": "OUTPUT_AT_EARLIEST_TRANSFORMED"},
        {"window_fn": "CustomTimestampingFixedWindowsWindowFn(10)"},
        {"trigger_fn": "__import__('os').system('true')"},
        {"trigger_fn": "AfterCount(1).__class__"},
        {"trigger_fn": "AfterCount(0)"},
        {"trigger_fn": "FixedWindows(10)"},
    ):
        assert not beam_supported(bad), bad
        assert beam_unsupported_reason(bad)
    with pytest.raises(UnsupportedConfig):
        run_beam([{"accumulation_mode": "retracting"}], [I(1)])


def test_divergence_flags():
    assert set(beam_oracle.KNOWN_DIVERGENCES) >= beam_divergences(
        {
            "window_fn": "Sessions(5)",
            "trigger_fn": "AfterWatermark(early=AfterAny(AfterProcessingTime(1), AfterCount(2)))",
            "timestamp_combiner": "OUTPUT_AT_EARLIEST",
        }
    )
    flags = beam_divergences(
        {
            "window_fn": "Sessions(5)",
            "trigger_fn": "OrFinally(AfterCount(2), AfterProcessingTime(1))",
        }
    )
    assert {
        "parallel_processing_time",
        "session_timers",
        "processing_time_as_event_time",
        "no_gc",
    } <= flags
    flags = beam_divergences(
        {
            "window_fn": "FixedWindows(10)",
            "trigger_fn": "AfterWatermark()",
            "timestamp_combiner": "OUTPUT_AT_EARLIEST",
        }
    )
    assert "no_gc" not in flags and "processing_time_as_event_time" not in flags


# --- Beam behaviours that differ from docs/semantics.md (KNOWN_DIVERGENCES) ------

FIXED = "FixedWindows(10)"


def test_divergences_of_beam_python_are_as_documented():
    configs = {
        # no_gc: a trigger that never fired keeps its data forever.
        "never": {"window_fn": FIXED, "trigger_fn": "Never"},
        "count_leftover": {
            "window_fn": FIXED,
            "trigger_fn": "Repeatedly(AfterCount(2))",
            "accumulation_mode": "discarding",
        },
        # not_final: Default's ON_TIME pane is not final with lateness 0.
        "default": {"window_fn": FIXED, "trigger_fn": "Default"},
        # drop_boundary: kept at watermark == end + lateness.
        "boundary": {"window_fn": FIXED, "trigger_fn": "Default", "allowed_lateness": 5},
        # parallel_processing_time: AfterAny does not finish on its processing-time child.
        "any_apt": {
            "window_fn": FIXED,
            "trigger_fn": "AfterAny(AfterProcessingTime(2), AfterCount(3))",
        },
        # early_hold_kept: the second early pane still carries the first element's time.
        "hold": {
            "window_fn": FIXED,
            "trigger_fn": "AfterWatermark(early=AfterCount(1))",
            "accumulation_mode": "discarding",
            "timestamp_combiner": "OUTPUT_AT_EARLIEST",
        },
    }
    # event index:  0     1     2     3     4     5     6      7     8
    events = [I(1), C(3), I(7), I(2), I(3), I(5), W(15), I(4), W(100)]
    diag = {}
    results = dict(
        zip(configs, run_beam(list(configs.values()), events, diagnostics=diag), strict=True)
    )
    assert diag["stalled"] or diag["cancelled"]  # "never" holds the watermark forever
    assert results["never"] == []
    assert brief(results["count_leftover"]) == [
        (2, (0, 10000), [1, 7], "EARLY", 0, False),
        (4, (0, 10000), [2, 3], "EARLY", 1, False),
    ]  # 5 is never emitted
    assert brief(results["default"]) == [(6, (0, 10000), [1, 2, 3, 5, 7], "ON_TIME", 0, False)]
    assert brief(results["boundary"]) == [
        (6, (0, 10000), [1, 2, 3, 5, 7], "ON_TIME", 0, False),
        # watermark 15 == end 10 + lateness 5: kept (rule 3 drops it)
        (7, (0, 10000), [1, 2, 3, 4, 5, 7], "LATE", 1, False),
    ]
    # Fired at clock 3 by AfterProcessingTime(2) but not finished; finishes on count.
    assert brief(results["any_apt"]) == [
        (1, (0, 10000), [1], "EARLY", 0, False),
        (3, (0, 10000), [1, 2, 7], "EARLY", 1, True),
    ]
    assert [(p["step"], p["values"], p["timestamp"]) for p in results["hold"]] == [
        (0, [1], 1000),
        (2, [7], 1000),
        (3, [2], 1000),
        (4, [3], 1000),
        (5, [5], 1000),
        (6, [], 1000),  # the empty ON_TIME pane (rule 2), final
    ]
    assert results["hold"][-1]["timing"] == "ON_TIME" and results["hold"][-1]["final"]


def test_late_first_pane_is_labelled_late():
    """late_first_pane: a window created by late data starts with a LATE pane."""
    config = {"window_fn": FIXED, "trigger_fn": "Default", "allowed_lateness": 20}
    (panes,) = run_beam([config], [I(25), W(30), I(5)])
    assert brief(panes) == [
        (1, (20000, 30000), [25], "ON_TIME", 0, False),
        (2, (0, 10000), [5], "LATE", 0, False),
    ]
    assert panes[1]["nonspeculative_index"] == 0


def test_processing_time_is_compared_with_event_time():
    """processing_time_as_event_time: a processing-time firing at clock >= window end
    counts as the watermark having passed: the window finishes, later data is lost."""
    config = {"window_fn": FIXED, "trigger_fn": "AfterWatermark(early=AfterProcessingTime(5))"}
    events = [C(100), I(1), C(106), I(2), W(30)]
    (panes,) = run_beam([config], events)
    assert brief(panes) == [(2, (0, 10000), [1], "LATE", 0, True)]


def test_eow_late_hold_stalls_and_mislabels():
    """eow_late_hold + output_watermark_timing (Beam's early_late_sessions, Fixed)."""
    config = {
        "window_fn": FIXED,
        "trigger_fn": "AfterWatermark(late=AfterCount(2))",
        "allowed_lateness": 100,
    }
    diag = {}
    (panes,) = run_beam([config], [I(1), W(12), I(2), I(3)], diagnostics=diag)
    assert diag["stalled"]
    assert brief(panes) == [
        (1, (0, 10000), [1], "ON_TIME", 0, False),
        (3, (0, 10000), [1, 2, 3], "EARLY", 1, False),  # a late pane labelled EARLY
    ]
    assert panes[1]["nonspeculative_index"] == 1


def test_check_transcript_reports_differences():
    doc = next(d for d in DOCS if d["name"] == "fixed_default_late_data")
    assert beam_oracle.check_transcript(doc) == []
    wrong = yaml.safe_load("""
name: bad_expected_values
window_fn: FixedWindows(10)
combine_fn: sum
transcript:
  - input: [1, 2, 3]
  - watermark: 100
  - expect:
      - {window: [0, 9], value: 5}
""")
    problems = beam_oracle.check_transcript(wrong)
    assert len(problems) == 2 and "value': 5" in problems[0] and "'value': 6" in problems[1]
