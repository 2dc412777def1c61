"""``headwater bench general`` runs the general path per group and batched over the
same stream, and fails unless both changelogs are equal: a window Top-1 (small and
large) and an unwindowed keyed dedup. Timings are reported, never asserted."""

from __future__ import annotations

import json

import pandas as pd

from headwater.bench import general
from headwater.sql import sql
from headwater.sql.execute.local import run_stream


def test_bench_general_reports_every_case(capsys) -> None:
    argv = ["--rows", "600", "--windows", "6", "--steps", "3", "--small", "40"]
    argv += ["--dedup-rows", "800", "--dedup-keys", "90", "--dedup-steps", "4", "--json"]
    assert general.main(argv) == 0
    cases = {c["case"]: c for c in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(cases) == {"small", "large", "dedup"}
    for case in cases.values():
        assert {"per_group_cpu_s", "batched_cpu_s", "cpu_ratio"} <= set(case)
    assert cases["dedup"]["rows"] == 800 and cases["dedup"]["keys"] == 90


def test_the_dedup_case_is_each_items_first_bid() -> None:
    """The dedup's final table is the bounded answer (each item's earliest bid) and
    its key is the item (the general path, per item)."""
    table = general.keyed_bids(500, 40, 5)
    query = sql(general.DEDUP, {"Bid": table}, name="dedup")
    assert "key bid.item: state grows" in query.explain()
    run = run_stream(query.plan, batched=True)
    frame = table.frame.sort_values(["bidtime", "id"])
    expected = frame.drop_duplicates("item")[["item", "id"]].sort_values("id")
    got = query.to_pandas()[["item", "id"]].sort_values("id")
    pd.testing.assert_frame_equal(
        got.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False
    )
    assert len(run.changelog) >= len(expected)
