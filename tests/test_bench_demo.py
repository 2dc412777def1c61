"""`headwater bench demo` at a tiny size: both engines ran the demo's micro-batches
and computed the same windows and totals; never its timings."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_bench_demo_json(spark, tmp_path, capsys):
    from headwater.bench import main as bench_main

    # 60 events in 600 s steps: 2 micro-batches of the demo's timeline (58 scores,
    # then 2 stragglers) and the step that ends it, the fewest that still carry
    # state from one batch to the next; no score late beyond the allowed lateness.
    argv = ["demo", "--events", "60", "--step-seconds", "600", "--no-warmup"]
    assert bench_main([*argv, "--json", "--workdir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    hw, native = report["headwater"], report["native"]
    assert report["steps"] == 3
    # headwater's batches: one per step, then the end-of-input run's one.
    assert hw["batches"] == report["steps"] + 1
    assert native["batches"] == report["steps"]
    # every event and a control row per step crossed each engine (headwater's
    # end-of-input run reads one more control row)
    assert native["input_rows"] == 60 + report["steps"]
    assert hw["input_rows"] == native["input_rows"] + 1
    assert hw["dropped"] == native["dropped"] == 0
    assert hw["windows"] == native["windows"] > 0
    assert report["agree"] is True
    phases = {"triggerExecution", "addBatch", "queryPlanning", "walCommit", "commitOffsets"}
    assert phases <= set(hw["median_ms"]) and phases <= set(native["median_ms"])
