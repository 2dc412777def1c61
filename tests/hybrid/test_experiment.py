"""The issue's done-when checks on the experiment (200,000 events per profile), and the CLI."""

from __future__ import annotations

import json

import pytest

from headwater.cli import main as headwater
from headwater.hybrid.experiment import run_experiment
from headwater.hybrid.generator import PROFILES, generate

METHODS = ("hpm", "mp_k_slack", "aq_k_slack")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["game1", "game2"])
def test_done_when(name, tmp_path):
    stream = generate(PROFILES[name], seed=0, events=200_000)
    m = run_experiment(stream, tmp_path, throughput_shards=(1,))
    hpm, mp, aq = (m[k] for k in METHODS)
    assert hpm["avg_buffer_s"] <= 0.3 * mp["avg_buffer_s"]
    assert hpm["stream_violation_rate"] <= m["settings"]["delta"]
    assert hpm["final_max_rel_error"] == 0.0
    assert aq["final_max_rel_error"] > 0
    assert hpm["corrected_windows"] > 0 and hpm["correction_delay_s"] > 0
    assert hpm["avg_latency_s"] < mp["avg_latency_s"]


@pytest.mark.slow
def test_cli_writes_metrics_and_plots(tmp_path, capsys):
    out = tmp_path / "hpm"
    argv = ["experiment", "hpm", "--profile", "game1", "--events", "20000", "--seed", "1"]
    rc = headwater([*argv, "--shards", "2", "--throughput-shards", "1,2", "--out", str(out)])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    common = {"avg_buffer_s", "avg_latency_s", "stream_violation_rate", "final_max_rel_error"}
    for method in METHODS:
        assert common <= set(metrics[method])
    assert {"corrected_windows", "correction_delay_s"} <= set(metrics["hpm"])
    assert metrics["settings"]["shards"] == 2 and set(metrics["throughput"]) == {"1", "2"}
    for plot in ("buffer", "latency", "accuracy", "throughput"):
        assert (out / f"{plot}.png").stat().st_size > 1000
    assert "metrics.json" in capsys.readouterr().out


def test_cli_explains_a_missing_source(capsys):
    with pytest.raises(SystemExit):
        headwater(["experiment", "hpm", "--out", "x"])
    assert "--profile" in capsys.readouterr().err
