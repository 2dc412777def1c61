"""`headwater bench core` at tiny sizes: the report's shape, never its timings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headwater.bench import core


def test_workload_is_deterministic_and_out_of_order():
    a = core.make_workload(5_000, 100, 10, seed=3)
    b = core.make_workload(5_000, 100, 10, seed=3)
    assert np.array_equal(a.timestamps, b.timestamps)
    assert np.array_equal(a.keys, b.keys)
    assert a.bundles == 10 and a.bounds[-1] == 5_000
    assert (np.diff(a.timestamps) < 0).any()  # out of order
    assert (np.diff(a.watermarks) >= 0).all()
    # Watermarks never sit on a window boundary (Beam and headwater drop differently there).
    assert (a.watermarks % 1000 == 500).all()
    p = a.prefix(1_200)
    assert len(p) == 1_200 and p.bundles == 3 and p.bounds[-1] == 1_200


def test_headwater_only(capsys):
    assert (
        core.main(
            ["--elements", "3000", "--keys", "50", "--bundles", "10", "--skip-beam", "--json"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["headwater"]["panes"] > 0
    assert "beam" not in out


@pytest.mark.beam
def test_core_bench_json(capsys):
    rc = core.main(["--elements", "20000", "--beam-elements", "2000", "--keys", "2000", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for field in (
        "elements",
        "keys",
        "bundles",
        "seed",
        "beam_elements",
        "beam_prefix",
        "headwater",
        "headwater_prefix",
        "beam",
        "ratio",
        "ratio_same_input",
        "target_met",
        "comparison",
    ):
        assert field in out, field
    assert out["beam_prefix"] is True and out["beam_elements"] == 2000
    for side in ("headwater", "headwater_prefix", "beam"):
        r = out[side]
        for field in ("elements_per_s", "seconds", "panes", "panes_by_timing", "checksum"):
            assert field in r, (side, field)
        assert r["panes"] > 0
        assert r["elements_per_s"] > 0
    assert out["beam"]["elements"] == 2000
    assert out["ratio"] > 0
    # Same input, same configuration: the same panes and the same final sums.
    assert out["beam"]["panes"] == out["headwater_prefix"]["panes"]
    assert out["comparison"]["checksum_equal"]
