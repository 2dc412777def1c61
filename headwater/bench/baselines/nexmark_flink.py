"""The Flink baseline of ``headwater bench nexmark``: Apache Flink's SQL on the same events.

PyFlink lives in a virtualenv of its own (``scripts/flink.sh``; its pins conflict with
headwater's), so Flink runs as one subprocess for all the queries
(``flink_nexmark.py`` beside this file, one JVM). Each query runs timed in streaming mode
over the generator's Parquet files into the blackhole sink (as NEXMark measures Flink),
then untimed in batch mode into a CSV directory. Here: find that Python and the Parquet
jar, run it, and check each Flink final table against headwater's of the same query (a
multiset of rows, in the sink table's column types).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from headwater.bench import fresh
from headwater.io.sinks.relation import COUNT, ROW
from headwater.io.sinks.results import BATCH_COL

#: PyFlink's version scripts/flink.sh installs by default (its cache folder's name).
FLINK_VERSION = "2.3.0"
RUNNER = Path(__file__).with_name("flink_nexmark.py")
#: Flink's parallelism (one task slot per core of the 2-core machine, as Spark's local[2]).
PARALLELISM = 2


def flink_python(explicit: str | None = None) -> Path | None:
    """The Flink venv's Python: ``--flink-python``, else $HEADWATER_FLINK_PYTHON, else the
    cache folder scripts/flink.sh fills; None when there is none."""
    cache = Path(os.environ.get("HEADWATER_CACHE", Path.home() / ".cache" / "headwater"))
    default = cache / f"flink-{FLINK_VERSION}" / "bin" / "python"
    path = Path(explicit or os.environ.get("HEADWATER_FLINK_PYTHON") or default)
    return path if path.exists() else None


def parquet_jar() -> Path | None:
    """flink-sql-parquet's jar (the Hadoop client's beside it) that scripts/flink.sh
    fetches; None when it has not (Flink then reads the CSV files)."""
    cache = Path(os.environ.get("HEADWATER_CACHE", Path.home() / ".cache" / "headwater"))
    folder = cache / f"flink-sql-parquet-{FLINK_VERSION}"
    jar = folder / f"flink-sql-parquet-{FLINK_VERSION}.jar"
    return jar if (folder / ".complete").exists() and jar.exists() else None


def run_flink(
    python: Path,
    names: list[str],
    data: Path,
    query_dir: Path,
    out: Path,
    warm: Path | None = None,
    repeat: int = 1,
) -> Iterator[dict[str, Any]]:
    """Flink's result per query as it finishes (Flink's logs go to ``out/flink.log``);
    ``warm``: a small generator directory the first query runs over first, untimed."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [str(python), str(RUNNER), "--data", str(data), "--query-dir", str(query_dir)]
    argv += ["--out", str(out), "--queries", ",".join(names), "--parallelism", str(PARALLELISM)]
    argv += ["--repeat", str(max(1, repeat))]
    if warm is not None:
        argv += ["--warmup-data", str(warm)]
    jar = parquet_jar()
    if jar is not None:
        argv += ["--parquet-jar", str(jar)]
    with open(out / "flink.log", "w") as log:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    yield json.loads(line)
            if proc.wait() != 0:
                raise RuntimeError(f"Flink's runner exited with {proc.returncode}: see {log.name}")


def _files(flink_dir: Path) -> list[str]:
    return sorted(str(p) for p in flink_dir.glob("*") if not p.name.startswith("."))


def csv_rows(flink_dir: Path) -> int:
    """Rows Flink wrote into a sink directory."""
    files = _files(flink_dir)
    if not files:
        return 0
    with duckdb.connect() as con:
        found = con.execute("SELECT count(*) FROM read_csv(?, header=false)", [files])
        return int(found.fetchone()[0])


def compare(name: str, headwater_sink: Path, flink_dir: Path) -> dict[str, Any]:
    """Flink's rows and whether they equal headwater's final table (as multisets, Flink's
    CSV read in the sink table's column types): ``differing`` counts the distinct rows
    whose multiplicity differs."""
    files = _files(flink_dir)
    with duckdb.connect() as con:
        columns = _headwater_columns(con, name, headwater_sink)
        if columns is None:  # headwater wrote no row: Flink agrees when it wrote none
            rows = csv_rows(flink_dir)
            return {"rows": rows, "matches_headwater": rows == 0, "differing": rows}
        cols = ", ".join(f'"{c}"' for c in columns)
        if files:
            con.execute(
                "CREATE TABLE f AS SELECT * FROM read_csv(?, header=false, columns=?)",
                [files, columns],
            )
        else:  # Flink wrote no row
            con.execute(f"CREATE TABLE f AS SELECT {cols} FROM hw.nexmark_{name} WHERE false")
        rows = int(con.execute("SELECT count(*) FROM f").fetchone()[0])
        differing = con.execute(
            f"""WITH h AS (SELECT {cols}, sum({COUNT}) AS n FROM hw.nexmark_{name} GROUP BY ALL
                HAVING sum({COUNT}) <> 0),
               g AS (SELECT {cols}, count(*) AS n FROM f GROUP BY ALL)
            SELECT count(*) FROM ((FROM h EXCEPT FROM g) UNION ALL (FROM g EXCEPT FROM h))"""
        ).fetchone()[0]
    return {"rows": rows, "matches_headwater": differing == 0, "differing": int(differing)}


def _headwater_columns(con, name: str, sink: Path) -> dict[str, str] | None:
    """The columns and types of headwater's sink table (attached as ``hw``), None if absent."""
    if not sink.exists():
        return None
    con.execute(f"ATTACH '{sink}' AS hw (READ_ONLY)")
    found = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_catalog = 'hw' AND table_name = ? ORDER BY ordinal_position",
        [f"nexmark_{name}"],
    ).fetchall()
    return {c: t for c, t in found if c not in (ROW, COUNT, BATCH_COL)} or None


def entry(r: dict[str, Any], total: int, check_dir: Path, sink: Path | None) -> dict[str, Any]:
    """A query's entry from the runner's line: the streaming run's seconds and events/s per
    core; the batch check's rows and, with headwater's ``sink``, whether they are equal."""
    if r["status"] != "ran":
        return r
    seconds = r["seconds"]
    timed = {
        "status": "ran",
        "mode": r["mode"],
        "source": r["source"],
        "seconds": round(seconds, 3),
        "events_per_s_per_core": round(total / seconds / PARALLELISM),
    }
    if "runs" in r:  # --repeat: the median run's seconds above, every run's here
        timed["runs"] = [round(s, 3) for s in r["runs"]]
    if r.get("check") != "ran":  # timed, but no final table to count or compare
        reason = r.get("check_reason", "not run")
        return {**timed, "rows": None, "check": "failed", "check_reason": reason}
    checked = compare(check_dir.name, sink, check_dir) if sink is not None else {}
    return {**timed, "rows": csv_rows(check_dir), "check": "batch", **checked}


def flink_entries(
    names: list[str], data: Path, work: Path, args, total: int, sinks: dict[str, Path]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(query, Flink's entry) per query: ran (the streaming run's seconds and events/s/core,
    the batch check's rows and whether they equal headwater's sink where ``sinks`` has the
    query: those headwater ran) or failed with Flink's error, or not run."""
    python = flink_python(args.flink_python)
    if python is None:
        reason = "no Flink virtualenv: run `bash scripts/flink.sh` (or pass --flink-python)"
        for name in names:
            yield name, {"status": "not run", "reason": reason}
        return
    out = fresh(work / "flink")  # the batch check's sinks append to what is there
    warm = work / "warmup" / "data"
    warm_data = warm if getattr(args, "warmup_events", 0) and warm.is_dir() else None
    warmed: dict[str, Any] = {}
    repeat = getattr(args, "repeat", 1)
    for r in run_flink(python, names, data, Path(args.query_dir), out, warm_data, repeat):
        if "warmup" in r:  # the untimed first run: shown with the first query's entry
            warmed = {"warmup": r}
            continue
        name = r.pop("query")
        yield name, {**entry(r, total, out / name, sinks.get(name)), **warmed}
        warmed = {}
