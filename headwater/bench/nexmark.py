"""``headwater bench nexmark``: the Flink NEXMark queries over generated events.

For each query (tests/sql/nexmark/queries/qN.sql, Flink's text with only its
connectors replaced), headwater runs it as a script into a DuckDB table sink
(``--sink blackhole``: NEXMark's sink, every row computed, counted and discarded):
on the local runner over the replay files, or on Spark (``--runner spark``)
over the Parquet file streams (availableNow). The other engines (``--engines``):
``spark``, Spark's own Structured Streaming written by hand (baselines/nexmark_spark.py)
over the same Parquet files, each micro-batch run into Spark's ``noop`` sink and
counted; ``flink``, Flink's SQL on the same query text over the same events as CSV
(baselines/nexmark_flink.py), each result checked against headwater's final table.
Reported per engine: status (ran / refused with headwater's message / not written or
failed, with why), seconds, events per second per core (all generated events, as
NEXMark counts them) and output rows, then headwater's ratio to each other engine. A
progress line per query (to stderr with ``--json``); at the end the status table as
Markdown, or with ``--json`` one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from headwater.bench import HelpFormatter, fresh, latency
from headwater.bench.baselines import nexmark_spark
from headwater.bench.baselines.nexmark_flink import flink_entries
from headwater.bench.baselines.nexmark_spark import NATIVE_MISSING
from headwater.bench.collector import collector_time
from headwater.io.sinks.blackhole import BlackholeSink, noop_count
from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write
from headwater.sql.errors import SqlError
from headwater.sql.script import run_script

#: The query texts, in the source tree.
QUERY_DIR = Path(__file__).resolve().parents[2] / "tests" / "sql" / "nexmark" / "queries"
ALL = [f"q{i}" for i in range(24)]
#: Cores each runner uses (the local runner is one process; Spark runs local[2]).
CORES = {"local": 1, "spark": 2}
ENGINES = ("headwater", "spark", "flink")
_REPLAY = re.compile(r"'format' = 'replay', 'path' = '\$\{DATA\}/(\w+)\.jsonl'")
#: The WITH clause of a query's sink table (its CREATE TABLE nexmark_qN).
_SINK_WITH = re.compile(r"(CREATE TABLE nexmark_q\d+\s*\(.*?\)\s*WITH\s*)\((.*?)\);", re.S)
SINKS = ("table", "blackhole")
REPLAYS = ("parquet", "jsonl")
EMITS = ("change", "watermark")
#: A windowing table function or a legacy group window: the queries whose results
#: Flink writes once per window (a window aggregation, join or Top-N).
WINDOWED = re.compile(r"\b(TUMBLE|HOP|SESSION|CUMULATE)\s*\(", re.I)
#: ``--order``: which engine runs a query first, and which queries are warmed up.
ORDERS = ("fair", "headwater-first")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="headwater bench nexmark",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--queries", default=",".join(ALL), help="comma-separated")
    p.add_argument("--events", type=int, default=10_000, help="events")
    p.add_argument(
        "--runner", choices=["local", "spark"], default="local", help="where the queries run"
    )
    p.add_argument(
        "--engines",
        default=None,
        help="comma-separated among headwater, spark (Spark's own streaming queries) and"
        " flink (Flink's SQL, PyFlink from scripts/flink.sh); None: headwater, and spark"
        " with --runner spark",
    )
    p.add_argument(
        "--flink-python",
        default=None,
        help="the Flink virtualenv's python (None: $HEADWATER_FLINK_PYTHON or scripts/flink.sh's)",
    )
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    p.add_argument("--rate", type=int, default=1000, help="events/s of event time")
    p.add_argument("--out-of-order-ms", type=int, default=2000, help="arrival delay")
    p.add_argument("--step-ms", type=int, default=1000, help="replay step, ms")
    p.add_argument(
        "--events-per-file",
        type=int,
        default=None,
        help="events per Parquet file (None: events/10)",
    )
    p.add_argument("--query-dir", default=str(QUERY_DIR), help="where qN.sql and ddl.sql are")
    p.add_argument(
        "--workdir", default=None, help="data, sinks, checkpoints (None: a temporary directory)"
    )
    p.add_argument(
        "--latency",
        action="store_true",
        help="feed the events at --rate events/s of wall-clock time to long-running queries"
        " (--runner spark; headwater and spark) and report the latency from an event's"
        " arrival to the commit of the micro-batch that read it (headwater.bench.latency)",
    )
    p.add_argument(
        "--warmup-events",
        type=int,
        default=1000,
        help="untimed run of each query (of the first only with --order headwater-first) per"
        " engine over this many events of their own before the clock (0: none)",
    )
    p.add_argument(
        "--order",
        choices=ORDERS,
        default="fair",
        help="fair: every query warmed up on each engine (--warmup-events) before its timed"
        " runs, and the engine that runs first alternating query by query; headwater-first:"
        " the first query warmed up only (--latency: none), headwater first on every query"
        " (the order before issue 18, which gave Spark's own query the plans headwater's run"
        " had compiled)",
    )
    p.add_argument(
        "--sink",
        choices=SINKS,
        default="table",
        help="headwater's sink: table (DuckDB, the rows Flink's are checked against) or"
        " blackhole (NEXMark's: every row computed, counted and discarded)",
    )
    p.add_argument(
        "--replay",
        choices=REPLAYS,
        default="parquet",
        help="the local runner's replay files: parquet (the replay in columns, read without"
        " parsing text) or jsonl (JSON lines)",
    )
    p.add_argument(
        "--emit",
        choices=EMITS,
        default="change",
        help="headwater's materialization: change (the query as written: every change of"
        " its result) or watermark (EMIT AFTER WATERMARK on the windowed queries where the"
        " planner takes it: each window's result once, as Flink emits a window aggregation;"
        " the others as written)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs of each query per engine (throughput runs; fair: the engine that"
        " runs first alternating run by run): the entry is the median run, with every"
        " run's seconds in 'runs'",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def generated(args) -> Any:
    """The events of the run's generator options (seeded: the same on every engine)."""
    config = NexmarkConfig(
        events=args.events,
        seed=args.seed,
        first_event_rate=args.rate,
        out_of_order_ms=args.out_of_order_ms,
    )
    return generate(config)


@contextlib.contextmanager
def workdir(args) -> Iterator[Path]:
    """``--workdir`` (kept), or a temporary directory removed after the run."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        yield work


def prepare(args, work: Path, engines: list[str]) -> tuple[Any, Path]:
    """Generate the events once; write replay and Parquet files (and CSV for Flink) and
    the side input."""
    events = generated(args)
    data = work / "data"
    per_file = args.events_per_file or max(1, args.events // 10)
    columnar = getattr(args, "replay", "jsonl") == "parquet"  # the local runner's replays
    formats = ["replay-parquet" if columnar else "replay", "parquet"]
    formats += ["csv"] if "flink" in engines else []
    write(events, data, formats, per_file, step_ms=args.step_ms)
    keys = np.arange(10_000)
    side = pd.DataFrame({"key": keys, "value": (keys * 7).astype(str)})
    side.to_csv(data / "side_input.csv", index=False)
    return events, data


def warm_up(args, work: Path, engines: list[str]) -> Callable[[str], None]:
    """Prepare ``--warmup-events`` events of their own under ``work/warmup``; the
    function that runs a query there once, untimed, on headwater and on Spark's own
    streaming: the JVM's JIT, the Python workers and the session's plans of that
    query are then paid by neither engine's timed run. Flink's runner warms up in
    its own JVM over the same events (``warmup/data``, with Flink's CSV too).
    Nothing to run with ``--warmup-events 0``."""
    if not args.warmup_events:
        return lambda name: None
    small = argparse.Namespace(**{**vars(args), "events": min(args.warmup_events, args.events)})
    small.events_per_file = None
    warm = work / "warmup"
    warm.mkdir(exist_ok=True)
    _, data = prepare(small, warm, engines)

    def run(name: str) -> None:
        if "headwater" in engines:
            run_headwater(name, small, data, warm, small.events)
        if "spark" in engines:
            run_native(name, data, warm, small.events)

    return run


def run_order(args, index: int, engines: list[str]) -> list[str]:
    """The engines in the order the ``index``-th query runs them (``--order``): with
    ``fair``, headwater first on the 1st, 3rd ... query and Spark first on the others
    (what the first run leaves, e.g. the files in the page cache, goes to each engine
    in turn); ``headwater-first``, the order of ``engines``."""
    timed = [e for e in engines if e != "flink"]
    if args.order == "fair" and index % 2 == 1:
        return timed[::-1]
    return timed


def script(name: str, args, data: Path, sink: Path) -> str:
    """The query's script: ddl.sql (replay files, or Parquet directories on Spark)."""
    ddl = (Path(args.query_dir) / "ddl.sql").read_text()
    if args.runner == "spark":
        ddl = _REPLAY.sub(r"'format' = 'parquet', 'path' = '${DATA}/\1'", ddl)
    elif getattr(args, "replay", "jsonl") == "parquet":
        ddl = _REPLAY.sub(r"'format' = 'replay', 'path' = '${DATA}/\1.replay.parquet'", ddl)
    query = (Path(args.query_dir) / f"{name}.sql").read_text()
    if getattr(args, "sink", "table") == "blackhole":
        query = blackholed(query)
    text = ddl + "\n" + query
    return text.replace("${DATA}", str(data)).replace("${SINK}", str(sink))


def blackholed(query: str) -> str:
    """The query's text with its sink's WITH clause ``'connector' = 'blackhole'``
    (NEXMark's sink)."""
    out, n = _SINK_WITH.subn(r"\1('connector' = 'blackhole');", query)
    if n != 1:
        raise ValueError(f"the query declares {n} nexmark_qN sink tables, not one")
    return out


def sink_rows(sink: Path, name: str) -> int:
    """Rows of the sink table (each distinct row kept once with its count; no
    table: the query wrote no row)."""
    if not sink.exists():
        return 0
    with duckdb.connect(str(sink)) as con:
        tables = {t for (t,) in con.execute("SHOW TABLES").fetchall()}
        if f"nexmark_{name}" not in tables:
            return 0
        return int(con.execute(f"SELECT coalesce(sum(__n), 0) FROM nexmark_{name}").fetchone()[0])


def sink_path(name: str, args, work: Path) -> Path:
    """The DuckDB file of headwater's sink table for a query."""
    return work / f"{name}-{args.runner}.duckdb"


def run_headwater(name: str, args, data: Path, work: Path, total: int) -> dict[str, Any]:
    sink = fresh(sink_path(name, args, work))
    options: dict[str, Any] = {}
    if args.runner == "spark":
        options["checkpoint"] = str(fresh(work / f"checkpoint-{name}"))
        started_session()
    text = script(name, args, data, sink)
    try:
        if getattr(args, "emit", "change") == "watermark" and WINDOWED.search(text):
            try:  # refused before it runs where no group completes: then as written
                emitted = after_watermark(text)
                return _run(name, emitted, "after watermark", args, sink, total, **options)
            except SqlError:
                pass
        return _run(name, text, "every change", args, sink, total, **options)
    except SqlError as exc:
        return {"status": "refused", "reason": str(exc).splitlines()[0]}
    except Exception as exc:  # noqa: BLE001 - reported in the table; the next queries run
        return failed(exc)


def _run(name: str, text: str, emit: str, args, sink: Path, total: int, **options):
    """One timed run of the query's script: its entry (SqlError if refused)."""
    sinks: dict[str, Any] = {}
    with collector_time() as collector:
        started = time.perf_counter()
        list(run_script(text, runner=args.runner, sinks=sinks, **options))
        seconds = time.perf_counter() - started
    rows = counted_rows(sinks, sink, name)
    # the cycle collector's share, in this process (on Spark: the driver's only)
    gc_s = round(collector.seconds, 3)
    return {**_timed(seconds, total, CORES[args.runner], rows), "emit": emit, "gc_s": gc_s}


def counted_rows(sinks: dict[str, Any], sink: Path, name: str) -> int:
    """The rows of the query's sink: a blackhole's count, or its DuckDB table's."""
    hole = sinks.get(f"nexmark_{name}")
    return hole.rows if isinstance(hole, BlackholeSink) else sink_rows(sink, name)


def after_watermark(text: str) -> str:
    """The script with ``EMIT AFTER WATERMARK`` on its INSERT's query (the last
    statement): each window's result once, when the watermark completes it, as
    Flink emits a window aggregation's rows. Only for a windowed query
    (:data:`WINDOWED`): a query of rows on their own or of unwindowed groups gives
    each change as Flink does, and waiting would only delay it."""
    body = text.rstrip()
    if not body.endswith(";"):
        raise ValueError("the query's script does not end with its INSERT's ';'")
    return body[:-1].rstrip() + "\nEMIT AFTER WATERMARK;\n"


def failed(exc: Exception) -> dict[str, Any]:
    """A run that raised (e.g. Spark's StreamingQueryException when a Python worker did
    not connect back in time): its status, with the exception's first line."""
    lines = str(exc).strip().splitlines() or [""]
    return {"status": "failed", "reason": f"{type(exc).__name__}: {lines[0]}"}


def _timed(seconds: float, events: int, cores: int, rows: int) -> dict[str, Any]:
    return {
        "status": "ran",
        "seconds": round(seconds, 3),
        "events_per_s_per_core": round(events / seconds / cores),
        "rows": rows,
    }


def activate(spark) -> None:
    """Make ``spark`` the calling thread's active session (in the JVM, where
    ``SparkSession.getActiveSession()`` reads it): a new thread starts without one."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def started_session() -> Any:
    """The SparkSession, started and its workers checked before the clock (as for Spark's
    own queries): the first query timed does not pay them."""
    from headwater.runners.spark.session import check_workers
    from headwater.runners.spark.timeline import spark_session

    spark = spark_session()
    check_workers(spark)
    return spark


def run_native(name: str, data: Path, work: Path, total: int) -> dict[str, Any]:
    """Spark's own Structured Streaming query (availableNow), each micro-batch run
    into Spark's ``noop`` sink (every row and column materialized, as headwater's
    blackhole does) and counted in that same job: rows per batch (append), or the
    last batch's (complete: the final table)."""
    counted: list[int] = []
    spark = started_session()
    started = time.perf_counter()
    mode = nexmark_spark.run(
        spark,
        name,
        data,
        fresh(work / f"native-checkpoint-{name}"),
        lambda df: counted.append(noop_count(df)),
    )
    if mode is None:
        return {"status": "not written", "reason": NATIVE_MISSING.get(name, "not hand-written")}
    rows = counted[-1] if mode == "complete" and counted else sum(counted)
    return _timed(time.perf_counter() - started, total, CORES["spark"], rows)


def latency_headwater(name: str, args, plan: latency.Feed, work: Path) -> dict[str, Any]:
    """headwater's query, long-running on Spark over the fed files."""
    spark = started_session()
    live = fresh(work / f"live-headwater-{name}")
    latency.live_directory(plan, live)
    sink = fresh(work / f"{name}-latency.duckdb")
    root = fresh(work / f"latency-checkpoint-{name}")
    text = script(name, args, live, sink)
    errors: list[Exception] = []
    sinks: dict[str, Any] = {}

    def run() -> None:
        try:
            # This thread's own session is Spark's default one, whose query manager
            # may not be ``spark``'s: make it ``spark``, where active_query looks.
            activate(spark)
            list(run_script(text, runner="spark", checkpoint=str(root), follow=True, sinks=sinks))
        except Exception as exc:  # noqa: BLE001 - reported as the query's status
            errors.append(exc)

    runner = threading.Thread(target=run, name=f"headwater-{name}", daemon=True)
    runner.start()
    query = latency.active_query(spark, runner)
    if query is None:
        for active in spark.streams.active:  # started too late to be measured
            active.stop()
        runner.join(latency.DRAIN_S)
        if errors and isinstance(errors[0], SqlError):
            return {"status": "refused", "reason": str(errors[0]).splitlines()[0]}
        return failed(errors[0] if errors else RuntimeError("no streaming query started"))
    try:
        measured = latency.measure(spark, query, plan, live, root)
    except RuntimeError as exc:
        return failed(exc)
    finally:
        runner.join(60)
    if errors:
        return failed(errors[0])
    return measured.report(plan, counted_rows(sinks, sink, name))


def latency_native(name: str, plan: latency.Feed, work: Path, sink: str = "table"):
    """Spark's own query, long-running over the fed files; its sink brings each
    micro-batch's rows to the driver, as headwater's table sink does, or (``sink``
    ``blackhole``) writes them to ``noop``, as headwater's blackhole does."""
    spark = started_session()
    live = fresh(work / f"live-spark-{name}")
    latency.live_directory(plan, live)
    counted: list[int] = []
    root = fresh(work / f"native-latency-checkpoint-{name}")
    count = noop_count if sink == "blackhole" else lambda df: len(df.toPandas())
    started = nexmark_spark.start(
        spark, name, live, root, lambda df: counted.append(count(df)), trigger={}
    )
    if started is None:
        return {"status": "not written", "reason": NATIVE_MISSING.get(name, "not hand-written")}
    query, mode = started
    try:
        measured = latency.measure(spark, query, plan, live, root)
    except RuntimeError as exc:
        return failed(exc)
    rows = counted[-1] if mode == "complete" and counted else sum(counted)
    return measured.report(plan, rows)


def bench_latency(args, names: list[str], engines: list[str]) -> dict[str, Any]:
    """The latency run (``--latency``): each query on each engine over the fed files;
    with ``--order fair`` the first query's latency run once untimed on each engine
    (:func:`warm_latency`), each query first runs untimed (availableNow) on both
    engines over the warm-up events, and the engine that runs first alternates; with
    ``headwater-first``, no warm-up and headwater first (the order before)."""
    if args.runner != "spark":
        raise ValueError("--latency runs on Spark: pass --runner spark")
    out = sys.stderr if args.json else sys.stdout
    with workdir(args) as work:
        events = generated(args)
        plan = latency.stage(events, work, args.rate, args.events_per_file)
        result: dict[str, Any] = {
            "mode": "latency",
            "events": events.events,
            "rate": args.rate,
            "runner": args.runner,
            "engines": engines,
            "config": vars(args),
            "queries": {name: {} for name in names},
        }
        fair = args.order == "fair"
        warm = warm_up(args, work, engines) if fair else (lambda name: None)
        if fair and names and args.warmup_events:
            warm_latency(args, work, names[0], engines)
        for i, name in enumerate(names):
            warm(name)  # fair: the query's plans compiled on both engines first
            ran = {}
            for engine in run_order(args, i, engines):
                ran[engine] = latency_run(engine, name, args, plan, work)
            skipped = {"status": "not measured", "reason": "Spark engines only"}
            result["queries"][name].update({e: ran.get(e, skipped) for e in engines})
            print(latency_progress(name, result["queries"][name]), file=out, flush=True)
    return result


#: Seconds of feed, at least, of the untimed latency run before the first query's.
WARM_FEED_S = 10


def warm_latency(args, work: Path, name: str, engines: list[str]) -> None:
    """Query ``name``'s latency run once, untimed, on each engine, over a feed of its
    own (``--warmup-events``, and at least :data:`WARM_FEED_S` seconds of it at
    ``--rate``). A long-running query's small batches run code that one
    ``availableNow`` batch (:func:`warm_up`) leaves cold in the JVM's JIT: on
    headwater's stateless path, the parsing and analysis of each batch's statement.
    Without this, the process's first latency run paid it (docs/nexmark.md, "The
    first latency run of a process")."""
    events = min(args.events, max(args.warmup_events, WARM_FEED_S * args.rate))
    small = argparse.Namespace(**{**vars(args), "events": events})
    where = work / "warmup-feed"
    where.mkdir(exist_ok=True)
    plan = latency.stage(generated(small), where, args.rate, args.events_per_file)
    for engine in run_order(args, 0, engines):
        latency_run(engine, name, small, plan, where)


def latency_run(engine: str, name: str, args, plan: latency.Feed, work: Path) -> dict[str, Any]:
    """One engine's latency run of query ``name`` over ``plan``'s feed (``engine``:
    headwater, or spark, Spark's own query)."""
    if engine == "headwater":
        return latency_headwater(name, args, plan, work)
    return latency_native(name, plan, work, getattr(args, "sink", "table"))


def latency_progress(name: str, entry: dict[str, Any]) -> str:
    return progress(
        name,
        entry,
        lambda r: (
            f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, "
            f"{r['batches']} batches of median {_ms(r['batch_median_ms'])} ms"
            f"{_phases(r.get('phase_median_ms') or {})}, "
            f"{r.get('compilations')} compilations of generated code"
        ),
    )


#: The phases of Spark's ``durationMs`` the latency report shows, in this order.
PHASES = ("addBatch", "queryPlanning", "getBatch", "walCommit", "commitOffsets", "latestOffset")


def _phases(phases: dict[str, float]) -> str:
    shown = [f"{k} {phases[k]:.0f}" for k in PHASES if k in phases]
    return f" ({', '.join(shown)})" if shown else ""


def latency_cell(r: dict[str, Any]) -> str:
    if r["status"] != "ran":
        return f"{r['status']}: {r['reason'].replace('|', '/')}"
    median = _ms(r["batch_median_ms"])
    return f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f} ({r['batches']}, {median})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def latency_markdown(result: dict[str, Any]) -> str:
    """Per query and engine: p50 / p99 latency and the micro-batches' median duration."""
    engines = result["engines"]
    header = ["query"] + [f"{e}: p50 / p99 ms (batches, median ms)" for e in engines]
    both = "headwater" in engines and "spark" in engines
    header += ["p99 headwater/spark"] if both else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, entry in result["queries"].items():
        cells = [name]
        cells += [latency_cell(entry[e]) for e in engines]
        if both:
            mine, theirs = entry["headwater"], entry["spark"]
            ran = mine["status"] == theirs["status"] == "ran"
            cells.append(f"{mine['p99_ms'] / theirs['p99_ms']:.2f}" if ran else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + phases_markdown(result)


def phases_markdown(result: dict[str, Any]) -> str:
    """Per query and engine that ran, the median ms of each phase of Spark's
    ``durationMs`` over its measured micro-batches."""
    header = ["query", "engine", *PHASES, "triggerExecution"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, entry in result["queries"].items():
        for engine, r in entry.items():
            phases = r.get("phase_median_ms") or {}
            if r["status"] == "ran" and phases:
                cells = [_ms(phases.get(k)) for k in header[2:]]
                lines.append("| " + " | ".join([name, engine, *cells]) + " |")
    return "\n".join(lines)


def engines_of(args) -> list[str]:
    if args.engines is None:
        return ["headwater"] + (["spark"] if args.runner == "spark" else [])
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise ValueError(f"unknown engines {unknown}; choose among {', '.join(ENGINES)}")
    return engines


def bench(args) -> dict[str, Any]:
    names = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in names if q not in ALL]
    if unknown:
        raise ValueError(f"unknown queries {unknown}; choose from q0..q23")
    engines = engines_of(args)
    if args.latency:
        return bench_latency(args, names, engines)
    out = sys.stderr if args.json else sys.stdout
    with workdir(args) as work:
        events, data = prepare(args, work, engines)
        warm = warm_up(args, work, engines)
        result: dict[str, Any] = {
            "events": events.events,
            "generator_events_per_s": round(events.events_per_second),
            "runner": args.runner,
            "engines": engines,
            "config": vars(args),
            "queries": {name: {} for name in names},
        }
        for i, name in enumerate(names):
            if args.order == "fair" or i == 0:  # headwater-first: the first query only
                warm(name)
            runs: dict[str, list[dict[str, Any]]] = {}
            for k in range(repeats(args)):  # fair: each engine first in turn
                for engine in run_order(args, i + k, engines):
                    if engine == "headwater":
                        r = run_headwater(name, args, data, work, events.events)
                    else:
                        r = run_native(name, data, work, events.events)
                    runs.setdefault(engine, []).append(r)
            ran = {engine: median_run(rs) for engine, rs in runs.items()}
            entry = result["queries"][name]
            entry.update({e: ran[e] for e in engines if e in ran})
            print(progress(name, entry), file=out, flush=True)
        if "flink" in engines:
            queries = result["queries"]
            ran = [n for n in names if queries[n].get("headwater", {}).get("status") == "ran"]
            # a blackhole keeps no table to compare Flink's with: rows are counted only
            blackhole = getattr(args, "sink", "table") == "blackhole"
            sinks = {} if blackhole else {n: sink_path(n, args, work) for n in ran}
            for name, r in flink_entries(names, data, work, args, events.events, sinks):
                result["queries"][name]["flink"] = r
                print(progress(name, {"flink": r}), file=out, flush=True)
    return result


def repeats(args) -> int:
    """Timed runs per query and engine (``--repeat``, at least one)."""
    return max(1, getattr(args, "repeat", 1))


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry for a query's runs on one engine: the first that did not run, or the
    run of the median seconds (the lower of the two middle ones: a run that happened),
    with every run's seconds in ``runs`` and, if their row counts differ, all of them
    in ``rows_per_run`` (a repeat reads the same events, so they should not)."""
    failed = [r for r in runs if r.get("status") != "ran"]
    if failed:
        return failed[0]
    if len(runs) == 1:
        return runs[0]
    seconds = [r["seconds"] for r in runs]
    median = statistics.median_low(seconds)
    chosen = dict(runs[seconds.index(median)], runs=seconds)
    rows = [r.get("rows") for r in runs]
    if len(set(rows)) > 1:
        chosen["rows_per_run"] = rows
    return chosen


def _check(r: dict[str, Any]) -> str:
    """The mode the engine ran in (Flink's), and whether its rows equal headwater's final
    table (when checked)."""
    mode = f", {r['mode']} mode" if r.get("mode") else ""
    if r.get("check") == "failed":
        return f"{mode}, not checked ({r['check_reason']})"
    if r.get("matches_headwater") is None:
        return mode
    if r["matches_headwater"]:
        return f"{mode}, equal to headwater's"
    return f"{mode}, differs from headwater's ({r['differing']} distinct rows)"


def _rows(r: dict[str, Any]) -> str:
    """The rows counted, or that they were not (a run whose check failed)."""
    return "rows not counted" if r.get("rows") is None else f"{r['rows']} rows"


def _cell(r: dict[str, Any]) -> str:
    if r["status"] == "ran":
        return f"ran: {_rows(r)}, {r['events_per_s_per_core']:,} events/s/core" + _check(r)
    return f"{r['status']}: {r['reason'].replace('|', '/')}"


def _throughput(r: dict[str, Any]) -> str:
    return (
        f"{_rows(r)} in {r['seconds']:.2f}s "
        f"({r['events_per_s_per_core']:,} events/s/core{_check(r)})"
    )


def progress(name: str, entry: dict[str, Any], ran=_throughput) -> str:
    """A query's progress line: per engine, ``ran(result)`` or why it did not run."""
    parts = []
    for engine, r in entry.items():
        text = ran(r) if r["status"] == "ran" else f"{r['status']} ({r['reason']})"
        parts.append(f"{engine}: {text}")
    return f"{name}: " + "; ".join(parts)


def ratio(entry: dict[str, Any], other: str) -> str:
    """headwater's events/s/core over the other engine's, when both ran."""
    mine, theirs = entry.get("headwater", {}), entry.get(other, {})
    if mine.get("status") != "ran" or theirs.get("status") != "ran":
        return "-"
    return f"{mine['events_per_s_per_core'] / theirs['events_per_s_per_core']:.2f}"


def markdown(result: dict[str, Any]) -> str:
    """The status table: per query and engine, what ran (rows, events/s/core, whether it
    equals headwater's final table) or why not; then headwater/engine ratios."""
    engines = result["engines"]
    others = [e for e in engines if e != "headwater"] if "headwater" in engines else []
    header = ["query"] + [f"{e} ({result['runner']})" if e == "headwater" else e for e in engines]
    header += [f"headwater/{e}" for e in others]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, entry in result["queries"].items():
        cells = [name] + [_cell(entry[e]) for e in engines] + [ratio(entry, e) for e in others]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        result = bench(args)
    except ValueError as exc:
        print(f"headwater bench nexmark: {exc}", file=sys.stderr)
        return 2
    table = latency_markdown if args.latency else markdown
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0
