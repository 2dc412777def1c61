"""The issue's done-when checks on the experiment (200,000 events per profile), and the CLI."""

from __future__ import annotations

import json

import pytest

from headwater.cli import main as headwater
from headwater.hybrid.experiment import Throughput, run_experiment
from headwater.hybrid.generator import PROFILES, generate

METHODS = ("hpm", "mp_k_slack", "aq_k_slack")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["game1", "game2"])
def test_done_when(name, tmp_path):
    stream = generate(PROFILES[name], seed=0, events=200_000)
    m = run_experiment(stream, tmp_path, runner="local", throughput=Throughput(shards=(1,)))
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
    argv += ["--runner", "local", "--shards", "2", "--throughput-shards", "1,2"]
    rc = headwater([*argv, "--out", str(out)])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    common = {"avg_buffer_s", "avg_latency_s", "stream_violation_rate", "final_max_rel_error"}
    for method in METHODS:
        assert common <= set(metrics[method])
    assert {"corrected_windows", "correction_delay_s"} <= set(metrics["hpm"])
    assert metrics["settings"]["shards"] == 2 and set(metrics["throughput"]["local"]) == {"1", "2"}
    for plot in ("buffer", "latency", "accuracy", "throughput"):
        assert (out / f"{plot}.png").stat().st_size > 1000
    assert "metrics.json" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.spark
def test_cli_runs_on_spark_by_default(spark, tmp_path):
    """The Spark runner (the default) over a short stream: the same metrics as the local
    runner, and a throughput measured on Spark (local[*] only here, in its own process)."""
    out = tmp_path / "hpm"
    argv = ["experiment", "hpm", "--profile", "game1", "--events", "4000", "--seed", "1"]
    argv += ["--shards", "2", "--throughput-shards", "1,2", "--throughput-masters", "local[*]"]
    argv += ["--throughput-events", "4000", "--throughput-density", "2"]
    argv += ["--throughput-repeats", "1", "--no-progress"]
    assert headwater([*argv, "--out", str(out)]) == 0
    assert headwater([*argv, "--runner", "local", "--out", str(tmp_path / "local")]) == 0
    on_spark = json.loads((out / "metrics.json").read_text())
    local = json.loads((tmp_path / "local" / "metrics.json").read_text())
    assert on_spark["settings"]["runner"] == "spark"
    for method in METHODS:
        assert on_spark[method] == pytest.approx(local[method])
    rates = on_spark["throughput"]["local[*]"]
    assert set(rates) == {"1", "2"} and min(rates.values()) > 0
    assert on_spark["throughput_setup"]["local[*]"]["tuples"] == 8000
    assert (out / "throughput.png").stat().st_size > 1000


def test_cli_explains_a_missing_source(capsys):
    with pytest.raises(SystemExit):
        headwater(["experiment", "hpm", "--out", "x"])
    assert "--profile" in capsys.readouterr().err
