"""Pipelines on a real multi-process Spark cluster, not only local[*].

``tests/distributed_job.py`` runs in a subprocess (the suite's shared session is a
single-JVM ``local[2]``) with its own SparkSession on ``local-cluster[2,1,1024]``:
a standalone master and two workers, each worker launching its executor as a
separate JVM with its own Python workers. It runs bounded pipelines and a
streaming pipeline (replay source, punctuated watermarks, RocksDB state, 4
state shards, a checkpoint, a stop and a restart from it; then an executor
killed mid-query), compares each with the local runner and reports which
executors ran the work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.runners.spark.isolated import run_isolated

JOB = Path(__file__).with_name("distributed_job.py")
PREFIX = "HEADWATER_SUMMARY "
TIMEOUT = 900  # seconds; about 2 minutes on an idle 2-core machine

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _run_job(tmp_path: Path) -> tuple[dict, str]:
    summary_path = tmp_path / "summary.json"
    cmd = [
        sys.executable,
        str(JOB),
        "--workdir",
        str(tmp_path / "cluster"),
        "--summary",
        str(summary_path),
    ]
    # A process group of its own: on a timeout the driver, its JVM (with the
    # master and workers) and the executor JVMs are ended together.
    try:
        done = run_isolated(cmd, timeout=TIMEOUT, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"distributed job timed out after {TIMEOUT} s\n{(exc.stderr or '')[-3000:]}")
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, f"distributed job failed ({done.returncode}):\n{err[-5000:]}"
    lines = [line for line in out.splitlines() if line.startswith(PREFIX)]
    assert lines, f"no summary in the job's output:\n{out[-2000:]}\n{err[-3000:]}"
    return json.loads(lines[-1][len(PREFIX) :]), err


def _check_phase(summary: dict, name: str) -> dict:
    phase = summary.get(name)
    assert phase is not None, f"phase {name} did not run"
    brief = json.dumps({k: v for k, v in phase.items() if k != "traceback"}, indent=1)
    assert "error" not in phase, f"{name} failed: {phase['error']}\n{phase.get('traceback')}"
    assert phase["equal"], f"{name}: Spark and the local runner disagree:\n{brief}"
    # The work ran on both executors, not on the driver.
    assert len(phase["cluster"]["executors"]) >= 2, f"{name} ran on one executor:\n{brief}"
    assert "driver" not in phase["cluster"]["executors"]
    return phase


def test_pipelines_on_a_two_executor_cluster(tmp_path):
    summary, _ = _run_job(tmp_path)

    # Two executors, each its own JVM process (neither is the driver), running
    # their own Python workers.
    executors = [e for e in summary["executors"] if e["isActive"]]
    assert len(executors) >= 2, summary["executors"]
    probe = summary["probe"]
    assert len(probe["executor_ids"]) >= 2 and probe["unresolved"] == 0, probe
    assert len(probe["executor_jvm_pids"]) >= 2, probe
    assert probe["driver_pid"] not in probe["executor_jvm_pids"], probe

    # Bounded: native Spark plans over 20k rows in 8 partitions, the same panes
    # as the local runner.
    for name in ("bounded_fixed", "bounded_sessions"):
        phase = _check_phase(summary, name)
        assert phase["rows_in"] == 20_000 and phase["partitions"] == 8
        assert phase["rows_spark"] == phase["rows_local"] > 0

    # Streaming: the same panes and dead letters, step by step, with the state
    # shards spread over both executors, across a stop and a restart.
    phase = _check_phase(summary, "streaming_restart")
    assert phase["batch_ids"] == list(range(phase["steps"]))
    assert phase["first_run"]["batches"] == phase["cut"]
    assert phase["second_run"]["batches"] == phase["steps"] - phase["cut"]
    assert phase["panes_spark"] == phase["panes_local"] > 0
    assert phase["dropped_spark"] == phase["dropped_local"] > 0
    for run in ("first_run", "second_run"):
        (operator,) = phase[run]["state_operators"]
        assert operator["numStateStoreInstances"] == 4, operator
    cluster = phase["cluster"]
    assert len(cluster["stateful_executors"]) >= 2, cluster
    assert sorted(cluster["partition_executors"]) == ["0", "1", "2", "3"], cluster

    # An executor JVM killed mid-query (after batch 4 was computed and its output
    # cached, before its dead letters were read): Spark recomputes the lost work,
    # the killed executor's shards get their state back from the checkpoint, and
    # every pane and dead letter is still the local runner's, exactly once.
    phase = _check_phase(summary, "streaming_executor_loss")
    assert phase["killed"], phase
    assert phase["batch_ids"] == list(range(phase["steps"]))
    assert phase["run"]["batches"] == phase["steps"]
    assert phase["panes_spark"] == phase["panes_local"] > 0
    assert phase["dropped_spark"] == phase["dropped_local"] > 0
    after = {e["id"]: e for e in phase["executors_after"]}
    assert after[phase["killed"]["executor"]]["isActive"] is False, after
    assert sum(e["isActive"] for e in after.values()) >= 1, after
