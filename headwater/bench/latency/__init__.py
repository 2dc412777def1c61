"""``headwater bench nexmark --latency``: NEXMark at a fixed arrival rate, on Spark.

Throughput runs read every file at once (``availableNow``); a latency run feeds the
same Parquet files into the watched directories at ``--rate`` events per second of
wall-clock time (the generator's event time advances at the same rate), while
each engine's query runs long-lived with Spark's default trigger (the next
micro-batch starts as soon as the last one ends, the lowest latency Spark
offers). Both engines read the same files with Spark's file source and commit
each micro-batch to their checkpoint, so one measure fits both, read from the
checkpoint: an event's **latency** is the time from its file's arrival (moved
into the directory) to the commit of the micro-batch that read it; by then
every result that event changed is in the sink (the query's rows that include
it, for a stateless query or an update; for a window that waits for the
watermark, its close comes from later events). Reported per engine: p50 and
p99 over the events, and the micro-batches' count and median duration (the
per-batch overhead). The first file of each table arrives before the query
starts and is not measured (its batch pays the query's start).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow.parquet as pq

from headwater.nexmark.output import write

#: Seconds to wait for the last fed file's micro-batch after the feed ends.
DRAIN_S = 120.0
#: Seconds between two looks at the checkpoint or the active queries while
#: waiting. The latencies come from the commit files' times, not from this loop,
#: which only has to stay light beside the queries it measures (each look at the
#: checkpoint parses every log file).
POLL_S = 0.5


@dataclass(frozen=True)
class Feed:
    """The staged Parquet files (``staged/<table>/part-k.parquet``, file k of every
    table covering the same arrival positions) and the rate they arrive at."""

    staged: Path
    files: int
    events_per_file: int
    rate: int

    def tables(self) -> list[str]:
        return sorted(p.name for p in self.staged.iterdir() if p.is_dir())

    def arrive(self, live: Path, k: int) -> dict[str, int]:
        """Move file k of every table into ``live`` (copied aside, then renamed: it
        appears whole); each path -> its arrival, epoch ns."""
        out = {}
        for table in self.tables():
            name = f"part-{k:05d}.parquet"
            hidden = live / table / f".{name}"  # Spark's file source skips dot files
            shutil.copyfile(self.staged / table / name, hidden)
            target = live / table / name
            os.rename(hidden, target)
            now = time.time_ns()
            os.utime(target, ns=(now, now))
            out[str(target)] = now
        return out

    def rows(self, live_path: str) -> int:
        path = Path(live_path)
        return pq.read_metadata(self.staged / path.parent.name / path.name).num_rows


def stage(events, work: Path, rate: int, events_per_file: int | None) -> Feed:
    """Write the events as Parquet under ``work/staged`` (``events_per_file``; None:
    a tenth of a second of events per file)."""
    per_file = events_per_file or max(1, rate // 10)
    staged = work / "staged"
    write(events, staged, ["parquet"], per_file)
    files = len(list((staged / "bid").glob("*.parquet")))
    return Feed(staged, files, per_file, rate)


def feed(plan: Feed, live: Path, started_ns: int) -> dict[str, int]:
    """Files 1.. at ``started_ns + k * events_per_file / rate``; path -> arrival ns."""
    arrivals: dict[str, int] = {}
    period_ns = plan.events_per_file * 1_000_000_000 // plan.rate
    for k in range(1, plan.files):
        wait = (started_ns + k * period_ns - time.time_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        arrivals.update(plan.arrive(live, k))
    return arrivals


# ---------------------------------------------------------------- the checkpoint


def _log_lines(path: Path) -> list[str]:
    """A metadata log file's lines after its version line."""
    return path.read_text().splitlines()[1:]


def files_read(checkpoint: Path) -> dict[int, dict[str, int]]:
    """Per source (its ordinal), each file it listed -> the source's log offset."""
    out: dict[int, dict[str, int]] = {}
    for source in sorted((checkpoint / "sources").glob("*")):
        entries: dict[str, int] = {}
        for log in source.iterdir():
            if log.name.startswith("."):
                continue
            for line in _log_lines(log):
                entry = json.loads(line)
                entries[unquote(urlparse(entry["path"]).path)] = int(entry["batchId"])
        out[int(source.name)] = entries
    return out


def tables_read(checkpoint: Path) -> set[str]:
    """The tables (directories) whose files the query's sources listed."""
    return {
        Path(path).parent.name for entries in files_read(checkpoint).values() for path in entries
    }


def batch_offsets(checkpoint: Path) -> dict[int, list[int | None]]:
    """Per micro-batch, each source's end offset (a file source's log offset)."""
    out = {}
    for log in (checkpoint / "offsets").iterdir():
        if log.name.startswith(".") or not log.name.isdigit():
            continue
        ends = []
        for line in _log_lines(log)[1:]:
            offset = json.loads(line) if line.strip() not in ("", "-") else None
            ends.append(offset.get("logOffset") if isinstance(offset, dict) else None)
        out[int(log.name)] = ends
    return out


def commits(checkpoint: Path) -> dict[int, int]:
    """Each committed micro-batch -> its commit time (the commit file's mtime, ns)."""
    folder = checkpoint / "commits"
    if not folder.exists():
        return {}
    return {
        int(p.name): p.stat().st_mtime_ns
        for p in folder.iterdir()
        if p.name.isdigit()  # not the temporary .crc / dot files
    }


def committed_at(checkpoint: Path) -> dict[str, int]:
    """Each file read -> the commit time (ns) of the micro-batch that read it (files
    whose micro-batch has not committed yet are left out)."""
    done = commits(checkpoint)
    offsets = batch_offsets(checkpoint)
    out = {}
    for source, entries in files_read(checkpoint).items():
        ends = sorted(
            (end[source], batch)
            for batch, end in offsets.items()
            if source < len(end) and end[source] is not None
        )
        if not ends:
            continue
        at = np.array([e for e, _ in ends])
        batches = [b for _, b in ends]
        for path, log_offset in entries.items():
            i = int(np.searchsorted(at, log_offset))  # the first batch whose end covers it
            if i < len(batches) and batches[i] in done:
                out[path] = done[batches[i]]
    return out


def query_checkpoint(root: Path) -> Path | None:
    """The checkpoint under ``root`` (headwater writes one per INSERT INTO)."""
    found = sorted(p.parent for p in root.rglob("offsets") if p.is_dir())
    return found[0] if found else None


# ---------------------------------------------------------------- one engine's run


@dataclass
class LatencyRun:
    """What one engine's long-lived query did over the fed files."""

    arrivals: dict[str, int]
    committed: dict[str, int]
    batch_ms: list[int]
    #: per phase of ``StreamingQueryProgress.durationMs``, its median over those batches
    phases_ms: dict[str, float] = field(default_factory=dict)
    #: Spark's compilations of generated code while those batches ran (:func:`compilations`)
    compiled: int | None = None

    def report(self, plan: Feed, rows: int) -> dict[str, Any]:
        missing = sorted(set(self.arrivals) - set(self.committed))
        if missing:
            return {
                "status": "failed",
                "reason": f"{len(missing)} of {len(self.arrivals)} files not committed "
                f"within {DRAIN_S:.0f} s of the feed's end",
            }
        paths = sorted(self.arrivals)
        ms = np.array([(self.committed[p] - self.arrivals[p]) / 1e6 for p in paths])
        weights = np.array([plan.rows(p) for p in paths])
        per_event = np.repeat(ms, weights)
        return {
            "status": "ran",
            "p50_ms": round(float(np.percentile(per_event, 50)), 1),
            "p99_ms": round(float(np.percentile(per_event, 99)), 1),
            "events": int(weights.sum()),
            "batches": len(self.batch_ms),
            "batch_median_ms": float(np.median(self.batch_ms)) if self.batch_ms else None,
            "phase_median_ms": self.phases_ms,
            "compilations": self.compiled,
            "rows": rows,
        }


def live_directory(plan: Feed, live: Path) -> None:
    """``live/<table>/`` holding file 0 of every table (read by the first batch)."""
    for table in plan.tables():
        (live / table).mkdir(parents=True, exist_ok=True)
    plan.arrive(live, 0)


def measure(spark, query, plan: Feed, live: Path, checkpoint_root: Path) -> LatencyRun:
    """With ``query`` (a started streaming query) through its first batch, feed the
    rest, wait for every file's batch to commit, stop the query."""
    try:
        first = _wait(lambda: _committed(checkpoint_root), DRAIN_S, query)
        if not first:
            raise RuntimeError(_why_not(query, "its first micro-batch did not commit"))
        checkpoint = query_checkpoint(checkpoint_root)
        read = tables_read(checkpoint)
        compiled_before = compilations(spark)
        fed = feed(plan, live, time.time_ns())  # every table's files: the same load
        arrivals = {path: at for path, at in fed.items() if Path(path).parent.name in read}

        def drained() -> bool:
            return set(arrivals) <= set(committed_at(checkpoint))

        _wait(drained, DRAIN_S, query)
        compiled = compilations(spark) - compiled_before
        progress = list(query.recentProgress)
        batches = _measured(progress)
        return LatencyRun(
            arrivals,
            committed_at(checkpoint),
            _batch_ms(batches),
            phase_medians(batches),
            compiled,
        )
    finally:
        query.stop()


def compilations(spark) -> int:
    """How many times this JVM has compiled Spark's generated Java code (Janino, tens
    of milliseconds each): a query whose plan's code differs from one micro-batch to
    the next (a literal that changes, say) compiles again in every batch, where
    Spark's own query compiles once. In ``local[N]`` the executors share the JVM."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def _committed(root: Path) -> bool:
    checkpoint = query_checkpoint(root)
    return checkpoint is not None and bool(commits(checkpoint))


def _why_not(query, what: str) -> str:
    error = query.exception()
    return f"{what}: {str(error).splitlines()[0]}" if error is not None else what


def _measured(progress: list[Any]) -> list[Any]:
    """The progress of each micro-batch that read rows, but the first (which pays
    the query's start; Spark keeps the last
    ``spark.sql.streaming.numRecentProgressUpdates``)."""
    return [p for p in progress if p.numInputRows > 0 and p.batchId > 0]


def _batch_ms(batches: list[Any]) -> list[int]:
    """Each batch's duration (its ``triggerExecution``)."""
    return [int(p.durationMs.get("triggerExecution", 0)) for p in batches]


def phase_medians(batches: list[Any]) -> dict[str, float]:
    """Per phase of Spark's ``durationMs`` (addBatch, queryPlanning, getBatch, walCommit,
    commitOffsets, latestOffset, triggerExecution), its median over ``batches``: where
    an engine's batch time goes, compared phase by phase with the other's."""
    phases = sorted({k for p in batches for k in p.durationMs})
    return {k: float(np.median([p.durationMs.get(k, 0) for p in batches])) for k in phases}


def _wait(condition, timeout: float, query) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if not query.isActive:
            return condition()
        time.sleep(POLL_S)
    return False


def active_query(spark, runner: threading.Thread, timeout: float = 120.0):
    """The streaming query a script started in ``runner`` (None if the script ended
    first: refused or failed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = spark.streams.active
        if active:
            return active[0]
        if not runner.is_alive():
            return None
        time.sleep(POLL_S)
    return None
