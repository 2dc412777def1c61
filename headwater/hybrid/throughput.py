"""Throughput of HPM's stream module on Spark against the number of shards.

Each measurement runs in a process of its own (a ``local-cluster`` master needs a
SparkSession of its own, and a fresh JVM makes the masters comparable)::

    python -m headwater.hybrid.throughput JOB.pkl

where ``JOB.pkl`` is a pickled :class:`ThroughputJob`; the process prints one line
``HEADWATER_THROUGHPUT {json}``. For every shard count it runs the stream module
(the quality-driven K-slack, ``shards`` state shards and as many shuffle
partitions) over the whole source, with a fresh checkpoint, into Spark's no-op
sink. Throughput is the source's tuples divided by the time Spark spent on the
micro-batches (the sum of their ``triggerExecution`` durations: query start
and JVM start are not counted); each shard count runs ``repeats`` times and the
fastest run counts. A run over a small warm-up source comes first, so that the
Python workers are started and the JVM is warm. With each rate comes the CPU
the process tree (driver, JVMs, Python workers) used during the run, in cores
(CPU seconds over wall seconds, from ``/proc``; None elsewhere): a run that
already keeps every core busy cannot go faster with more shards.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from headwater.hybrid.pipeline import Query
from headwater.hybrid.sparkrun import Source, spark_session, start, stream_query
from headwater.model.slack import SlackStrategy
from headwater.runners.spark.isolated import run_isolated

PREFIX = "HEADWATER_THROUGHPUT "


@dataclass(frozen=True)
class ThroughputJob:
    """What one process measures: ``shards`` on ``master``, in ``work``."""

    master: str
    source: Source
    warm_up: Source
    query: Query
    strategy: SlackStrategy
    shards: tuple[int, ...]
    work: str
    files_per_trigger: int = 4
    repeats: int = 2


def _noop(batch, batch_id) -> None:
    batch.write.format("noop").mode("overwrite").save()


@dataclass(frozen=True)
class Timed:
    """One run: the seconds Spark spent on its micro-batches, and the cores used."""

    seconds: float
    cores: float | None


def _run(spark, job: ThroughputJob, source: Source, shards: int, name: str) -> Timed:
    out = stream_query(
        spark, source, job.query, job.strategy, shards, files_per_trigger=job.files_per_trigger
    )
    cpu, wall = _tree_cpu(), time.perf_counter()
    query = start(out, _noop, Path(job.work) / f"checkpoint-{name}", shards)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the throughput run {name} failed: {query.exception()}")
    used, wall = _tree_cpu(), time.perf_counter() - wall
    cores = None if cpu is None or used is None else (used - cpu) / wall
    seconds = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress)
    return Timed(seconds / 1000, cores)


def _tree_cpu() -> float | None:
    """CPU seconds (user + system) of this process's descendants alive now (Linux)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    tick, children = os.sysconf("SC_CLK_TCK"), {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        cpu = (int(fields[11]) + int(fields[12])) / tick
        children.setdefault(int(fields[1]), []).append((int(entry.name), cpu))
    total, stack = 0.0, [os.getpid()]
    while stack:
        for pid, cpu in children.get(stack.pop(), []):
            total += cpu
            stack.append(pid)
    return total


def measure(job: ThroughputJob) -> dict:
    """Tuples per second for each shard count, and the executors the session had."""
    spark = spark_session(job.master, Path(job.work) / "scratch")
    try:
        _run(spark, job, job.warm_up, max(job.shards), "warm-up")
        rates, used = {}, {}
        for shards in job.shards:
            runs = [
                _run(spark, job, job.source, shards, f"{shards}-shards-{i}")
                for i in range(job.repeats)
            ]
            best = min(runs, key=lambda r: r.seconds)
            rates[str(shards)] = job.source.rows / best.seconds
            used[str(shards)] = None if best.cores is None else round(best.cores, 2)
        executors = spark.sparkContext._jsc.sc().getExecutorIds().size()
        cores = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    return {
        "master": job.master,
        "rates": rates,
        "cores_used": used,
        "executor_jvms": executors,  # 0: the driver's JVM runs the tasks (local[*])
        "cores": cores,
        "tuples": job.source.rows,
    }


def run_job(job: ThroughputJob, timeout: float = 3600) -> dict:
    """Measure ``job`` in a child process (its own process group, ended on a timeout)."""
    path = Path(job.work) / "job.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(job))
    cmd = [sys.executable, "-m", "headwater.hybrid.throughput", str(path)]
    done = run_isolated(cmd, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"throughput on {job.master} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(PREFIX) :])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    job = pickle.loads(Path(args[0]).read_bytes())
    print(PREFIX + json.dumps(measure(job)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
