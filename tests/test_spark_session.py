"""headwater on a SparkSession the user made (headwater/runners/spark/session.py).

A user's session has Spark's defaults: 200 shuffle partitions and the default
state store. headwater's queries run with one shuffle partition per shard and
the RocksDB state store, set for the query only; a session whose Python
workers cannot import headwater is refused with one clear error before a query
starts.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql.streaming import StreamingQuery

import headwater as hw
from headwater.io.arrival import in_arrival_order
from headwater.runners.spark.isolated import run_isolated
from headwater.runners.spark.session import (
    LOCAL_CHECKPOINT_CONF,
    PARTITIONS_CONF,
    PROVIDER_CONF,
    default_shards,
    restore_conf,
)

pytestmark = pytest.mark.spark

T0 = pd.Timestamp("2026-01-01 12:00:00")


def _files(directory: Path) -> list[pd.DataFrame]:
    """Three files, one per micro-batch, each two minutes later in event time (so
    Spark's watermark closes the first minute's windows in the third batch)."""
    frames = []
    for i in range(3):
        seconds = [i * 120 + s for s in range(0, 60, 6)]
        frame = pd.DataFrame(
            {
                "team": ["blue", "red"] * 5,
                "score": [s % 7 for s in seconds],
                "ts": [T0 + pd.Timedelta(seconds=s) for s in seconds],
            }
        )
        frame.to_json(directory / f"{i}.json", orient="records", lines=True, date_format="iso")
        frames.append(frame)
    in_arrival_order(directory / f"{i}.json" for i in range(3))
    return frames


#: The setting of the checkpoint manager in the sessions headwater makes.
(MANAGER_CONF,) = LOCAL_CHECKPOINT_CONF


@pytest.fixture
def user_session(spark):
    """The shared session with a user's defaults: 200 shuffle partitions, no state
    store provider and Spark's own checkpoint manager (restored afterwards)."""
    touched = (PARTITIONS_CONF, PROVIDER_CONF, MANAGER_CONF)
    saved = {key: spark.conf.get(key, None) for key in touched}
    spark.conf.set(PARTITIONS_CONF, "200")
    spark.conf.unset(PROVIDER_CONF)
    spark.conf.unset(MANAGER_CONF)
    try:
        yield spark
    finally:
        restore_conf(spark, saved)


def _team_totals(
    spark, source: Path, checkpoint: Path, last: bool = True
) -> tuple[pd.DataFrame, StreamingQuery]:
    """The panes and the query of one ``availableNow`` run of team totals per minute
    over the files in ``source`` not yet read (one per micro-batch), from
    ``checkpoint``; a run not ``last`` leaves the input open for the next."""
    stream = (
        spark.readStream.schema("team string, score long, ts timestamp")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    pipeline = (
        hw.from_spark(stream, event_time="ts", watermark="10 seconds")
        .window(hw.FixedWindows("1 minute"))
        .group_by("team")
        .agg(total=hw.sum("score"))
    )
    got: list[pd.DataFrame] = [pd.DataFrame()]
    query = pipeline.start(
        checkpoint_location=str(checkpoint),
        panes_sink=lambda batch, _: got.append(batch.toPandas()),
        trigger={"availableNow": True},
        end_of_input=last,
    )
    query.awaitTermination(180)
    assert query.exception() is None
    return pd.concat(got, ignore_index=True), query


def test_a_default_session_runs_with_one_partition_per_shard(user_session, tmp_path):
    spark = user_session
    source = tmp_path / "in"
    source.mkdir()
    frames = _files(source)
    panes, query = _team_totals(spark, source, tmp_path / "checkpoint")

    shards = default_shards(spark)
    assert shards <= spark.sparkContext.defaultParallelism < 200
    operators = [op for p in query.recentProgress for op in p["stateOperators"]]
    assert operators and {op["numShufflePartitions"] for op in operators} == {shards}
    # ... set for the query only: the session keeps the user's settings
    assert spark.conf.get(PARTITIONS_CONF) == "200"
    assert spark.conf.get(PROVIDER_CONF, None) is None

    # The windows the watermark closed are the bounded answer over the rows.
    closed = panes[panes.window_end <= T0 + pd.Timedelta(minutes=2)]
    assert len(closed) == 2
    bounded = frames[0].groupby("team").score.sum()
    assert dict(zip(closed.team, closed.total, strict=True)) == bounded.to_dict()


def test_a_checkpoint_restarts_under_the_other_checkpoint_manager(user_session, tmp_path):
    """A query checkpointed by Spark's own manager (a user's session) restarts under
    the one headwater's sessions set (LOCAL_CHECKPOINT_CONF), and its panes are the
    uninterrupted run's: both managers write the same files."""
    spark = user_session
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    _files(whole)
    for name in ("0.json", "1.json"):
        shutil.copy2(whole / name, split / name)
    uninterrupted, _ = _team_totals(spark, whole, tmp_path / "checkpoint-whole")

    first, _ = _team_totals(spark, split, tmp_path / "checkpoint-split", last=False)
    shutil.copy2(whole / "2.json", split / "2.json")
    spark.conf.set(MANAGER_CONF, LOCAL_CHECKPOINT_CONF[MANAGER_CONF])
    restarted, _ = _team_totals(spark, split, tmp_path / "checkpoint-split")

    columns = ["window_start", "window_end", "team", "total", "pane_index", "timing"]
    assert not first.empty and not restarted.empty
    both = pd.concat([first, restarted], ignore_index=True)[columns]
    expected = uninterrupted[columns]
    assert (
        both.sort_values(columns)
        .reset_index(drop=True)
        .equals(expected.sort_values(columns).reset_index(drop=True))
    )


_REFUSED = """
import sys
from pyspark.sql import SparkSession

import headwater as hw
from headwater.runners.spark.session import WorkerPythonError, check_workers

spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
stream = spark.readStream.format("rate").load()
pipeline = (
    hw.from_spark(stream, event_time="timestamp", watermark="1 second")
    .window(hw.FixedWindows("1 minute"))
    .agg(n=hw.count())
)
try:
    pipeline.start(checkpoint_location=sys.argv[1])
except WorkerPythonError as exc:
    print("REFUSED:", exc)
else:
    print("started")
    sys.exit(1)
# docs/spark.md's --py-files recipe: the zipped package is all the workers lack.
spark.sparkContext.addPyFile(sys.argv[2])
check_workers(spark)
print("SHIPPED")
spark.stop()
"""


@pytest.mark.slow
def test_workers_without_headwater_are_refused_before_the_query_starts(tmp_path):
    """Workers that run a Python without site-packages (``-S``: no headwater) get
    one error naming their interpreter and the fix, not a worker's traceback;
    shipping the package (docs/spark.md, ``--py-files``) is then enough."""
    worker = tmp_path / "python-without-headwater"
    worker.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    worker.chmod(worker.stat().st_mode | stat.S_IXUSR)
    script = tmp_path / "refused.py"
    script.write_text(textwrap.dedent(_REFUSED))
    package = Path(hw.__file__).parent
    shipped = shutil.make_archive(str(tmp_path / "headwater"), "zip", package.parent, package.name)
    done = run_isolated(
        [sys.executable, str(script), str(tmp_path / "checkpoint"), shipped],
        timeout=240,
        cwd=tmp_path,
        env={"PYSPARK_PYTHON": str(worker)},
    )
    out = done.stdout
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"Spark's Python workers use {worker}" in out
    assert "cannot import headwater" in out or "a worker failed" in out
    assert "set PYSPARK_PYTHON" in out and "--py-files" in out
    assert not os.path.exists(tmp_path / "checkpoint" / "offsets")
    assert out.rstrip().endswith("SHIPPED")


def test_the_docs_example_runs(spark):
    """docs/spark.md's Python blocks run as written (on the shared session)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "spark.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/spark.md", "exec"), {})  # noqa: S102


def test_the_docs_import_timing_commands_run():
    """docs/spark.md's commands that time PySpark's imports from its zips against
    the installed package run as written (from the checkout, the venv's python)."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "spark.md").read_text()
    blocks = [b for b in re.findall(r"```console\n(.*?)```", text, flags=re.S) if "zip" in b]
    assert len(blocks) == 1
    script = "\n".join(line[2:] for line in blocks[0].splitlines() if line.startswith("$ "))
    site = Path(pytest.importorskip("pyspark").__file__).parents[1]
    script = script.replace(".venv/lib/python3.11/site-packages", str(site))
    for name in re.findall(r"\$L/([\w.-]+\.zip)", script):  # the zips Spark's workers import
        assert (site / "pyspark" / "python" / "lib" / name).is_file(), name
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-ec", script], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("real") == 2  # each import timed


_OUT_OF_HEAP = """
from headwater.runners.spark.timeline import spark_session

spark = spark_session()  # none active: the session headwater builds
jvm = spark._jvm
print("HEAP", jvm.java.lang.Runtime.getRuntime().maxMemory(), flush=True)
try:
    jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 2**30)  # 8 GB
except Exception as exc:
    print("RAISED", type(exc).__name__, flush=True)
try:
    jvm.java.lang.System.currentTimeMillis()
    print("ALIVE", flush=True)
except Exception:
    print("EXITED", flush=True)
"""


@pytest.mark.slow
def test_the_session_headwater_builds_has_heap_and_exits_when_out_of_it(tmp_path):
    """headwater's own local session gives the driver 4 GB (Spark's 1 GB ran out in
    transformWithStateInPandas' state server on NEXMark q23), and a JVM out of heap
    exits: a thread that died of it left the query waiting for ever on its socket."""
    script = tmp_path / "heap.py"
    script.write_text(textwrap.dedent(_OUT_OF_HEAP))
    done = run_isolated([sys.executable, str(script)], timeout=240, cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert f"HEAP {4 * 2**30}" in lines, done.stdout + done.stderr[-3000:]
    assert "Terminating due to java.lang.OutOfMemoryError" in done.stdout + done.stderr
    assert lines[-1] == "EXITED", done.stdout
