"""``headwater bench stages`` runs (a small q4-shaped query), and its checksum
is the changelog's: the same run gives the same checksum, another query's data
another. Timings are reported, never asserted."""

from __future__ import annotations

import json

from headwater.bench.stages import main

SMALL = ["--rows", "2000", "--auctions", "500", "--categories", "20", "--steps", "10", "--json"]


def run(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_bench_stages_reports_and_its_checksum_follows_the_changelog(capsys) -> None:
    first = run(capsys, SMALL)
    assert first["rows"] == 2000 and first["steps"] == 10
    assert first["changelog_rows"] > 0 and first["stage1_changes"] > 0
    assert {"stage1_cpu_s", "stage2_cpu_s", "stage2_ms_per_step"} <= set(first)
    assert run(capsys, SMALL)["checksum"] == first["checksum"]
    fewer = run(capsys, [*SMALL[:5], "10", *SMALL[6:]])
    assert fewer["checksum"] != first["checksum"]
