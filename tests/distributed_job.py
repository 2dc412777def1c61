"""Run headwater pipelines on a multi-process Spark cluster and compare with the local runner.

Run by ``tests/test_distributed.py`` in a subprocess (the test suite's own
SparkSession is a single-JVM ``local[2]``; a cluster needs a session of its own)::

    python tests/distributed_job.py --summary OUT.json [--master MASTER] [--workdir DIR]

The default master is ``local-cluster[2,1,1024]``: a standalone master and two
workers inside the driver JVM, each worker launching its executor as a
separate JVM process (with its own Python workers), as on a real cluster. It
needs ``SPARK_HOME`` with ``bin/`` and ``jars/``: a pip-installed PySpark has
both inside the package, so the job makes a private ``SPARK_HOME`` under its
work directory with links to them (the workers write their ``work/``
directories under ``SPARK_HOME``, which must not be the installed package).
``--master`` takes another master URL (e.g. ``spark://HOST:PORT`` of a
standalone cluster whose workers share this machine's filesystem: the replay
files and checkpoints are local paths); the test uses the default.

Phases, each compared with the local runner (pandas, in this process):

* ``bounded_fixed`` / ``bounded_sessions``: ``hw.from_spark(df).window(...)
  .group_by(...).agg(...).to_spark()`` over 20,000 rows in 8 partitions against
  ``hw.from_pandas(...).to_pandas()`` on the same rows;
* ``streaming_restart`` (phase ``restart``): a replayed timeline (punctuated
  watermarks; early, on-time, late and dropped data; retractions) through the
  public API (``from_spark(replay).window(...).start(checkpoint_location=...)``,
  4 state shards, RocksDB), stopped after part of the timeline and restarted
  from its checkpoint (a shard's state is reloaded by whichever executor gets
  it), against ``LocalRunner.run_steps``, batch by batch;
* ``streaming_executor_loss`` (phase ``executor_loss``): the same pipeline with
  one executor JVM killed mid-query; Spark recomputes the lost work and the
  lost shards' state comes back from the checkpoint: the panes must not change;
* ``streaming_timeline`` (phase ``timeline``, not run by default): a timeline
  through :func:`headwater.runners.spark.timeline.run_timeline` (the
  transcript runner's path) with 4 shards, against the local runner.

For every phase the job records which executors ran its tasks (from Spark's
status REST API), in particular the tasks of the stateful stages (one task per
state shard). The summary is one JSON object, written to ``--summary`` and
printed as the last line of stdout prefixed with ``HEADWATER_SUMMARY``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import traceback
import urllib.request
from typing import Any

import numpy as np
import pandas as pd

NUM_SHARDS = 4
SUMMARY_PREFIX = "HEADWATER_SUMMARY "
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# ------------------------------------------------------------------ the cluster


def private_spark_home(workdir: str) -> str:
    """A SPARK_HOME for the pip-installed PySpark: links to its bin/ and jars/."""
    import pyspark

    package = os.path.dirname(os.path.abspath(pyspark.__file__))
    home = os.path.join(workdir, "spark-home")
    os.makedirs(home, exist_ok=True)
    for name in ("bin", "jars", "sbin", "python"):
        target = os.path.join(package, name)
        link = os.path.join(home, name)
        if os.path.exists(target) and not os.path.lexists(link):
            os.symlink(target, link)
    return home


def start_session(master: str, workdir: str):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # driver, workers and executors on loopback
    # The workers give their executors scratch directories (shuffle files, RocksDB
    # working copies) under SPARK_LOCAL_DIRS, overriding spark.local.dir.
    os.environ["SPARK_LOCAL_DIRS"] = os.path.join(workdir, "local")
    if master.startswith("local-cluster"):
        os.environ["SPARK_HOME"] = private_spark_home(workdir)
    from pyspark.sql import SparkSession

    conf = {
        "spark.master": master,
        "spark.app.name": "headwater-distributed",
        "spark.driver.memory": "1g",
        "spark.executor.memory": "768m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        # The status REST API (which executor ran which task) needs the UI server.
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(NUM_SHARDS),
        "spark.locality.wait": os.environ.get("HEADWATER_LOCALITY_WAIT", "3s"),
        "spark.default.parallelism": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
        "spark.local.dir": os.path.join(workdir, "local"),
        "spark.sql.warehouse.dir": os.path.join(workdir, "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={os.path.join(workdir, 'derby')}",
    }
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


class Status:
    """Spark's status REST API of the running application."""

    def __init__(self, spark) -> None:
        self.sc = spark.sparkContext
        self.base = f"{self.sc.uiWebUrl}/api/v1/applications/{self.sc.applicationId}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=30) as resp:
            return json.load(resp)

    def drain(self) -> None:
        """Wait until the status listener has seen every event posted so far."""
        try:
            self.sc._jsc.sc().listenerBus().waitUntilEmpty()
        except Exception:  # noqa: BLE001 - an internal API; fall back to a pause
            time.sleep(2)

    def executors(self) -> list[dict]:
        return [e for e in self.get("/executors") if e["id"] != "driver"]

    def wait_for_executors(self, n: int, timeout: float = 120) -> list[dict]:
        deadline = time.time() + timeout
        while True:
            active = [e for e in self.executors() if e.get("isActive", True)]
            if len(active) >= n or time.time() > deadline:
                return active
            time.sleep(0.5)

    def job_ids(self) -> set[int]:
        self.drain()
        return {j["jobId"] for j in self.get("/jobs")}

    def tasks_since(self, before: set[int], stateful_tasks: int | None = None) -> dict:
        """Executors that ran the tasks of the jobs started after ``before``.

        ``stateful_tasks``: the task count of the stateful stages (one task per
        state shard); their partitions are mapped to the executors that ran them.
        """
        self.drain()
        jobs = [j for j in self.get("/jobs") if j["jobId"] not in before]
        per_executor: dict[str, int] = {}
        stateful: dict[str, int] = {}
        shard_executors: dict[int, set[str]] = {}
        n_stages = 0
        for stage_id in sorted({s for j in jobs for s in j["stageIds"]}):
            try:
                attempts = self.get(f"/stages/{stage_id}?details=true")
            except Exception:  # noqa: BLE001 - a skipped stage has no attempt
                continue
            for attempt in attempts:
                tasks = (attempt.get("tasks") or {}).values()
                if not tasks:
                    continue
                n_stages += 1
                is_stateful = stateful_tasks is not None and attempt["numTasks"] == stateful_tasks
                for t in tasks:
                    if t.get("status") != "SUCCESS":
                        continue
                    ex = t["executorId"]
                    per_executor[ex] = per_executor.get(ex, 0) + 1
                    if is_stateful:
                        stateful[ex] = stateful.get(ex, 0) + 1
                        shard_executors.setdefault(int(t["index"]), set()).add(ex)
        return {
            "jobs": len(jobs),
            "stages": n_stages,
            "tasks_per_executor": per_executor,
            "executors": sorted(per_executor),
            "stateful_tasks_per_executor": stateful,
            "stateful_executors": sorted(stateful),
            "partition_executors": {str(k): sorted(v) for k, v in sorted(shard_executors.items())},
        }


def _probe(_: Any):
    """In a Python worker: the executor id of the JVM that started it, and pids."""
    from pyspark import TaskContext

    pid = os.getpid()
    executor, jvm_pid, proc = None, None, pid
    for _level in range(6):  # worker -> (daemon) -> executor JVM
        try:
            with open(f"/proc/{proc}/stat") as f:
                proc = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            break
        if "--executor-id" in args:
            executor = args[args.index("--executor-id") + 1]
            jvm_pid = proc
            break
    yield {
        "partition": TaskContext.get().partitionId(),
        "python_pid": pid,
        "executor_id": executor,
        "executor_jvm_pid": jvm_pid,
    }


def probe_executors(spark) -> dict:
    rows = spark.sparkContext.parallelize(range(8), 8).mapPartitions(_probe).collect()
    return {
        "driver_pid": os.getpid(),
        "executor_pids": {
            r["executor_id"]: r["executor_jvm_pid"] for r in rows if r["executor_id"] is not None
        },
        "executor_ids": sorted({r["executor_id"] for r in rows if r["executor_id"] is not None}),
        "executor_jvm_pids": sorted({r["executor_jvm_pid"] for r in rows if r["executor_jvm_pid"]}),
        "python_pids": sorted({r["python_pid"] for r in rows}),
        "unresolved": sum(r["executor_id"] is None for r in rows),
    }


# ---------------------------------------------------------------- comparisons


def _norm(v: Any) -> Any:
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(sorted((_norm(x) for x in v), key=repr))
    if isinstance(v, pd.Timestamp):
        return v.tz_localize(None).value // 1_000_000 if v.tzinfo else v.value // 1_000_000
    if isinstance(v, (float, np.floating)):
        return None if np.isnan(v) else round(float(v), 6)
    if isinstance(v, np.generic):
        return v.item()
    if v is pd.NaT:
        return None
    return v


def _rows(df: pd.DataFrame, cols: list[str]) -> list[tuple]:
    return sorted((tuple(_norm(v) for v in r) for r in df[cols].itertuples(index=False)), key=repr)


def compare(got: pd.DataFrame, want: pd.DataFrame, cols: list[str]) -> dict:
    g, w = _rows(got, cols), _rows(want, cols)
    out = {"rows_spark": len(g), "rows_local": len(w), "equal": g == w}
    if g != w:
        gs, ws = set(g), set(w)
        out["only_spark"] = [repr(r) for r in sorted(gs - ws, key=repr)[:5]]
        out["only_local"] = [repr(r) for r in sorted(ws - gs, key=repr)[:5]]
    return out


# ---------------------------------------------------------------------- data


def bounded_data(n: int = 20_000, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2026-01-01 00:00:00")
    # Clustered event times so that sessions both merge and split.
    ts = start + pd.to_timedelta(np.sort(rng.integers(0, 4 * 3600, n)), unit="s")
    return (
        pd.DataFrame(
            {
                "team": rng.choice([f"team{i:02d}" for i in range(40)], n),
                "score": rng.integers(0, 100, n).astype("int64"),
                "ts": ts.values,
            }
        )
        .sample(frac=1.0, random_state=seed)
        .reset_index(drop=True)
    )


def timeline(seed: int = 11, n_steps: int = 24, n_keys: int = 24):
    """Bundles of random keys and values, clock and watermark advances, late and
    too-late data."""
    from headwater.model.time import MAX_TIMESTAMP
    from headwater.runners.local import Bundle, ClockAdvance, WatermarkAdvance

    rnd = random.Random(seed)
    keys = [f"k{i:02d}" for i in range(n_keys)]
    steps: list = []
    now, wm = 0, 0
    for i in range(n_steps):
        kind = i % 4
        if kind in (0, 1):
            n = rnd.randint(8, 30)
            # Mostly near the watermark, some behind it (late; some beyond the lateness).
            ts = [max(0, wm + rnd.randint(-40_000, 30_000)) for _ in range(n)]
            steps.append(
                Bundle(
                    [rnd.choice(keys) for _ in range(n)], ts, [rnd.randint(1, 50) for _ in range(n)]
                )
            )
        elif kind == 2:
            now += rnd.randint(2_000, 9_000)
            steps.append(ClockAdvance(now))
        else:
            wm += rnd.randint(8_000, 20_000)
            steps.append(WatermarkAdvance(wm))
    # Always some data too late to keep: behind the watermark by more than a
    # window (10 s) plus the allowed lateness (20 s).
    wm += 60_000
    steps.append(WatermarkAdvance(wm))
    n = 4
    steps.append(
        Bundle(
            [rnd.choice(keys) for _ in range(n)],
            [wm - rnd.randint(31_000, 50_000) for _ in range(n)],
            [rnd.randint(1, 50) for _ in range(n)],
        )
    )
    steps.append(WatermarkAdvance(MAX_TIMESTAMP))
    return steps


def streaming_strategy():
    from headwater.model.combiners import Count, Max, Sum
    from headwater.model.strategy import WindowingStrategy
    from headwater.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark
    from headwater.model.windows import FixedWindows

    strategy = WindowingStrategy.of(
        FixedWindows(10),
        AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)),
        allowed_lateness=20,
        accumulation="retracting",
    )
    aggregations = {"total": (Sum(), "value"), "n": (Count(), None), "top": (Max(), "value")}
    return strategy, aggregations


# -------------------------------------------------------------------- phases


def phase_bounded(spark, status: Status, pdf: pd.DataFrame, window_fn, aggs: dict) -> dict:
    import headwater as hw

    sdf = spark.createDataFrame(pdf).repartition(8)
    assert sdf.rdd.getNumPartitions() == 8
    before = status.job_ids()
    t0 = time.time()
    spark.sparkContext.setJobGroup("headwater-bounded", "bounded pipeline")
    got = (
        hw.from_spark(sdf, event_time="ts")
        .window(window_fn)
        .group_by("team")
        .agg(**aggs())
        .to_spark()
        .toPandas()
    )
    seconds = time.time() - t0
    want = (
        hw.from_pandas(pdf, event_time="ts")
        .window(window_fn)
        .group_by("team")
        .agg(**aggs())
        .to_pandas()
    )
    cols = list(want.columns)
    out = {"rows_in": len(pdf), "partitions": 8, "seconds": round(seconds, 2)}
    missing = [c for c in cols if c not in got.columns]
    if missing:
        out.update(equal=False, error=f"columns missing on Spark: {missing}")
    else:
        out.update(compare(got, want, cols))
    out["cluster"] = status.tasks_since(before)
    return out


def _emission_rows(emissions, names: list[str]) -> tuple[list, list]:
    pane_cols = [
        "key",
        "window_start",
        "window_end",
        *names,
        "timestamp",
        "pane_index",
        "nonspeculative_index",
        "timing",
        "is_first",
        "is_last",
        "is_retraction",
    ]
    drop_cols = ["key", "timestamp", "window_start", "window_end", "reason"]
    panes, drops = [], []
    for i, em in enumerate(emissions):
        panes += [(i, *r) for r in _rows(em.panes, pane_cols)] if len(em.panes) else []
        drops += [(i, *r) for r in _rows(em.dropped, drop_cols)] if len(em.dropped) else []
    return panes, drops


def _diff_steps(got: list, want: list) -> list[int]:
    steps = {r[0] for r in got} | {r[0] for r in want}
    return sorted(
        s for s in steps if [r for r in got if r[0] == s] != [r for r in want if r[0] == s]
    )


def phase_timeline(spark, status: Status) -> dict:
    from headwater.runners.local import LocalRunner
    from headwater.runners.spark.timeline import run_timeline

    strategy, aggregations = streaming_strategy()
    steps = timeline()
    want = LocalRunner().run_steps(strategy, aggregations, steps)
    before = status.job_ids()
    t0 = time.time()
    got = run_timeline(strategy, aggregations, steps, spark=spark, num_shards=NUM_SHARDS)
    seconds = time.time() - t0
    names = list(aggregations)
    gp, gd = _emission_rows(got, names)
    wp, wd = _emission_rows(want, names)
    out = {
        "steps": len(steps),
        "seconds": round(seconds, 2),
        "panes_spark": len(gp),
        "panes_local": len(wp),
        "dropped_spark": len(gd),
        "dropped_local": len(wd),
        "keys": len({r[1] for r in wp}),
        "equal": gp == wp and gd == wd,
    }
    if not out["equal"]:
        out["mismatched_steps"] = _diff_steps(gp + gd, wp + wd)[:10]
        out["only_spark"] = [repr(r) for r in sorted(set(gp) - set(wp), key=repr)[:5]]
        out["only_local"] = [repr(r) for r in sorted(set(wp) - set(gp), key=repr)[:5]]
    out["cluster"] = status.tasks_since(before, stateful_tasks=NUM_SHARDS)
    return out


def _api_query(spark, path: str, checkpoint: str, panes_sink, dead_letter_sink) -> Any:
    """The streaming pipeline through the public API, started on a replay file."""
    import headwater as hw
    from headwater.io.replay import read_replay
    from headwater.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark
    from headwater.model.windows import FixedWindows

    df = read_replay(spark, path)
    return (
        hw.from_spark(df, event_time="ts", watermark="punctuated")
        .window(
            FixedWindows(10),
            trigger=AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)),
            allowed_lateness=20,
            accumulation="retracting",
        )
        .group_by("key")
        .agg(total=hw.sum("value"), n=hw.count(), top=hw.max("value"))
        .start(
            checkpoint_location=checkpoint,
            panes_sink=panes_sink,
            dead_letter_sink=dead_letter_sink,
            trigger={"availableNow": True},
            end_of_input=False,  # a timeline restarted part by part on one checkpoint
            num_shards=NUM_SHARDS,
        )
    )


class _ApiRun:
    """A timeline played through :func:`_api_query`, one or more times (restarts)
    on one checkpoint, its panes and dead letters collected per batch id."""

    def __init__(self, spark, workdir: str, name: str, steps: list) -> None:
        from headwater.runners.local import LocalRunner
        from headwater.runners.spark.timeline import timeline_steps

        self.spark = spark
        self.strategy, self.aggregations = streaming_strategy()
        self.steps = steps
        self.want = LocalRunner().run_steps(self.strategy, self.aggregations, steps)
        self.replay_steps, self.types, self.key_type = timeline_steps(steps)
        self.path = os.path.join(workdir, f"{name}.jsonl")
        self.checkpoint = os.path.join(workdir, f"{name}-checkpoint")
        self.panes: dict[int, pd.DataFrame] = {}
        self.dropped: dict[int, pd.DataFrame] = {}
        self.on_panes = None  # hook: f(batch_id) after a batch's panes are collected

    def _panes_sink(self, batch, batch_id: int) -> None:
        self.panes[batch_id] = batch.toPandas()
        if self.on_panes is not None:
            self.on_panes(batch_id)

    def _dropped_sink(self, batch, batch_id: int) -> None:
        self.dropped[batch_id] = batch.toPandas()

    def run(self, n_steps: int) -> dict:
        """Play the first ``n_steps`` steps (the same file, cut: offsets of earlier
        steps do not move, so a restart continues where the last run stopped)."""
        from headwater.io.replay import write_timeline

        write_timeline(
            self.path, self.replay_steps[:n_steps], columns=self.types, key_type=self.key_type
        )
        query = _api_query(
            self.spark, self.path, self.checkpoint, self._panes_sink, self._dropped_sink
        )
        try:
            query.awaitTermination(600)
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
        last = query.lastProgress or {}
        return {
            "batches": len(query.recentProgress),
            "batch_ms": [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress],
            "state_operators": [
                {
                    k: op.get(k)
                    for k in (
                        "operatorName",
                        "numRowsTotal",
                        "numShufflePartitions",
                        "numStateStoreInstances",
                    )
                }
                for op in last.get("stateOperators", [])
            ],
        }

    def compare(self) -> dict:
        names = list(self.aggregations)
        pane_cols = [
            "key",
            "window_start",
            "window_end",
            *names,
            "timestamp",
            "pane_index",
            "nonspeculative_index",
            "timing",
            "is_first",
            "is_last",
            "is_retraction",
        ]
        gp = [(i, *r) for i, b in sorted(self.panes.items()) if len(b) for r in _rows(b, pane_cols)]
        wp = [
            (i, *r)
            for i, e in enumerate(self.want)
            if len(e.panes)
            for r in _rows(e.panes, pane_cols)
        ]
        # A dead-letter row may stand for several elements (combiner lifting: ``elements``).
        drop_cols = ["key", "window_start", "window_end", "reason"]
        gd = [
            (i, *r[:-1])
            for i, b in sorted(self.dropped.items())
            if len(b)
            for r in _rows(b, [*drop_cols, "elements"])
            for _ in range(int(r[-1]))
        ]
        wd = [
            (i, *r)
            for i, e in enumerate(self.want)
            if len(e.dropped)
            for r in _rows(e.dropped, drop_cols)
        ]
        # Multisets of (batch, row...): one order for both sides.
        gp, wp, gd, wd = (sorted(x, key=repr) for x in (gp, wp, gd, wd))
        out = {
            "steps": len(self.steps),
            "batch_ids": sorted(set(self.panes) | set(self.dropped)),
            "panes_spark": len(gp),
            "panes_local": len(wp),
            "dropped_spark": len(gd),
            "dropped_local": len(wd),
            "equal": gp == wp and gd == wd,
        }
        if not out["equal"]:
            out["mismatched_steps"] = _diff_steps(gp + gd, wp + wd)[:10]
            out["only_spark"] = [repr(r) for r in sorted(set(gp) - set(wp), key=repr)[:5]]
            out["only_local"] = [repr(r) for r in sorted(set(wp) - set(gp), key=repr)[:5]]
        return out


def _moved_shards(cluster: dict) -> list[str]:
    """State shards run by more than one executor (state loaded from the checkpoint
    by an executor that had not held it before)."""
    return sorted(p for p, ex in cluster["partition_executors"].items() if len(ex) > 1)


def phase_restart(spark, status: Status, workdir: str, n_steps: int = 12, cut: int = 7) -> dict:
    """The public API's ``start()`` with a checkpoint; stopped after ``cut`` steps,
    restarted from the checkpoint for the rest."""
    run = _ApiRun(spark, workdir, "restart", timeline(seed=23, n_steps=n_steps))
    before = status.job_ids()
    t0 = time.time()
    first = run.run(cut)
    second = run.run(len(run.steps))
    out = {
        "cut": cut,
        "seconds": round(time.time() - t0, 2),
        "first_run": first,
        "second_run": second,
        **run.compare(),
    }
    out["cluster"] = status.tasks_since(before, stateful_tasks=NUM_SHARDS)
    out["moved_shards"] = _moved_shards(out["cluster"])
    return out


def phase_executor_loss(
    spark, status: Status, workdir: str, n_steps: int = 10, kill_at: int = 4
) -> dict:
    """An executor JVM is killed (SIGKILL) in the middle of the query: in the
    panes sink of batch ``kill_at``, while that batch's output is cached on the
    executors and before its dead letters are read. Spark must recompute what
    was lost, reload the lost shards' state from the checkpoint on the surviving
    (or a replacement) executor, and the panes must still be exactly the local
    runner's."""
    run = _ApiRun(spark, workdir, "loss", timeline(seed=31, n_steps=n_steps))
    pids = probe_executors(spark)["executor_pids"]
    killed: dict[str, Any] = {}

    def kill(batch_id: int) -> None:
        if batch_id == kill_at and not killed:
            victim = sorted(pids)[0]
            killed.update(executor=victim, pid=pids[victim], at=time.time())
            os.kill(pids[victim], 9)

    run.on_panes = kill
    before = status.job_ids()
    t0 = time.time()
    result = run.run(len(run.steps))
    out = {
        "kill_at": kill_at,
        "killed": {k: v for k, v in killed.items() if k != "at"},
        "seconds": round(time.time() - t0, 2),
        "run": result,
        **run.compare(),
    }
    out["cluster"] = status.tasks_since(before, stateful_tasks=NUM_SHARDS)
    out["moved_shards"] = _moved_shards(out["cluster"])
    out["executors_after"] = [
        {
            "id": e["id"],
            "isActive": e.get("isActive"),
            "failedTasks": e.get("failedTasks"),
            "totalTasks": e.get("totalTasks"),
        }
        for e in status.get("/allexecutors")
        if e["id"] != "driver"
    ]
    return out


def _fixed_aggs():
    import headwater as hw

    return {
        "total": hw.sum("score"),
        "n": hw.count(),
        "avg": hw.mean("score"),
        "lo": hw.min("score"),
        "hi": hw.max("score"),
    }


def _session_aggs():
    import headwater as hw

    return {"total": hw.sum("score"), "n": hw.count()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local-cluster[2,1,1024]")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--summary", default=None, help="write the JSON summary here")
    parser.add_argument(
        "--phases",
        default="bounded,restart,executor_loss",
        help="comma-separated: bounded, timeline, restart, executor_loss",
    )
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="headwater-distributed-")
    os.makedirs(workdir, exist_ok=True)
    phases = set(args.phases.split(","))

    import headwater as hw

    t0 = time.time()
    summary: dict[str, Any] = {"master": args.master, "workdir": workdir}
    spark = start_session(args.master, workdir)
    try:
        status = Status(spark)
        summary["spark_version"] = spark.version
        summary["startup_seconds"] = round(time.time() - t0, 2)
        summary["executors"] = [
            {"id": e["id"], "hostPort": e["hostPort"], "isActive": e.get("isActive")}
            for e in status.wait_for_executors(2)
        ]
        summary["probe"] = probe_executors(spark)

        def attempt(name: str, fn, *a) -> None:
            try:
                summary[name] = fn(*a)
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                summary[name] = {
                    "equal": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-4000:],
                }

        if "bounded" in phases:
            pdf = bounded_data()
            attempt(
                "bounded_fixed",
                phase_bounded,
                spark,
                status,
                pdf,
                hw.FixedWindows("5 minutes"),
                _fixed_aggs,
            )
            attempt(
                "bounded_sessions",
                phase_bounded,
                spark,
                status,
                pdf,
                hw.Sessions("30 seconds"),
                _session_aggs,
            )
        if "timeline" in phases:
            attempt("streaming_timeline", phase_timeline, spark, status)
        if "restart" in phases:
            attempt("streaming_restart", phase_restart, spark, status, workdir)
        if "executor_loss" in phases:
            attempt("streaming_executor_loss", phase_executor_loss, spark, status, workdir)
        summary["executors_final"] = [
            {
                "id": e["id"],
                "totalTasks": e.get("totalTasks"),
                "failedTasks": e.get("failedTasks"),
                "isActive": e.get("isActive"),
            }
            for e in status.get("/allexecutors")
            if e["id"] != "driver"
        ]
    finally:
        spark.stop()
    summary["total_seconds"] = round(time.time() - t0, 2)
    text = json.dumps(summary, default=str)
    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as f:
            f.write(text)
    print(SUMMARY_PREFIX + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
