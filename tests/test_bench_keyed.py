"""``headwater bench keyed`` runs both paths of an unwindowed keyed aggregate over
the same bids, and its run fails unless their changelogs are equal. Timings are
reported, never asserted."""

from __future__ import annotations

import json

import pytest

from headwater.bench import keyed
from headwater.bench.stages import bids


def test_bench_keyed_reports_both_paths(capsys) -> None:
    assert keyed.main(["--rows", "3000", "--keys", "300", "--steps", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == 3000 and out["keys"] == 300
    assert out["changelog_rows"] >= 300  # every key's first version at least
    assert {"general_cpu_s", "fast_cpu_s", "cpu_ratio"} <= set(out)


def test_bench_keyed_refuses_a_run_off_the_path_it_names(monkeypatch) -> None:
    monkeypatch.setattr(keyed, "QUERY", "SELECT DISTINCT auction FROM Bid")
    with pytest.raises(RuntimeError, match="did not take the fast path"):
        keyed.measure(bids(50, 10, 3, 3), fast=True)
