"""Apache Flink's own SQL over headwater's generated NEXMark events (the Flink baseline).

Run by ``headwater bench nexmark --engines ...,flink`` as a subprocess with the Python of
the Flink virtualenv (``scripts/flink.sh``), which holds PyFlink and not headwater: so this
file imports nothing of headwater and only the standard library at module level.

Each query is the text of ``tests/sql/nexmark/queries/qN.sql`` (Flink's own, with
headwater's connector clauses) given back Flink's connectors, and runs twice:

* **timed** (``--repeat`` times: the median run's seconds, every run's in ``runs``),
  as NEXMark measures Flink: streaming mode, ``parallelism.default`` = the cores
  given, the three sources the filesystem connector over the generator's Parquet
  directories (``flink-sql-parquet``'s jar, ``--parquet-jar``; CSV files without it) with
  ddl.sql's WATERMARK of 4 s, the sink ``'connector' = 'blackhole'``;
* **untimed check**, batch mode over the same sources into a CSV directory: the final
  table, which headwater's final table must equal (a streaming CSV sink takes no update,
  and the aggregates and joins without windows update).

One JSON object per query on stdout: ``{"query", "status": "ran"|"failed", "mode",
"source", "seconds", "runs", "reason", "check": "ran"|"failed", "check_reason"}``; with
``--warmup-data``, first ``{"warmup", "status", "seconds", "reason"}`` of the untimed run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

_SOURCE = re.compile(r"WITH \('format' = 'replay', 'path' = '\$\{DATA\}/(\w+)\.jsonl'\)")
_SINK = re.compile(r"WITH \(\s*'format' = 'table',\s*'path' = '\$\{SINK\}'\s*\)")
#: headwater's ddl.sql writes dateTime bare; Flink reserves DATETIME (its own DDL quotes it).
_BARE_DATETIME = re.compile(r"(?<!`)\bdateTime\b(?!`)")
_SIDE = re.compile(r"WITH \(\s*'format' = 'csv',\s*'path' = '\$\{DATA\}/(\w+)\.csv'\s*\)")
#: q14's function: headwater's Python count_char, in Flink the nexmark jar's Java class.
_PYTHON_FUNCTION = re.compile(r"AS 'headwater\.sql\.nexmark_udfs\.count_char' LANGUAGE PYTHON")
_JAVA_FUNCTION = "AS 'com.github.nexmark.flink.udf.CountChar'"
BLACKHOLE = "WITH ('connector' = 'blackhole')"


def source_clause(data: Path, table: str, parquet: bool) -> str:
    """A source table's connector: the Parquet directory, or the CSV file."""
    if parquet:
        return f"WITH ('connector' = 'filesystem', 'format' = 'parquet', 'path' = '{data / table}')"
    path = data / f"{table}.csv"
    return f"WITH ('connector' = 'filesystem', 'format' = 'csv', 'path' = '{path}')"


def flink_text(ddl: str, query: str, data: Path, sink: Path | None, parquet: bool = False) -> str:
    """The query with Flink's connectors (and Java functions) in place of headwater's: the
    sink a CSV directory, or the blackhole when ``sink`` is None."""
    ddl = _SOURCE.sub(
        lambda m: source_clause(data, m.group(1), parquet), _BARE_DATETIME.sub("`dateTime`", ddl)
    )
    query = _SIDE.sub(
        lambda m: (
            f"WITH ('connector' = 'filesystem', 'format' = 'csv', "
            f"'csv.ignore-parse-errors' = 'true', 'path' = '{data / (m.group(1) + '.csv')}')"
        ),
        query,
    )
    query = _PYTHON_FUNCTION.sub(_JAVA_FUNCTION, query)
    if sink is None:
        query = _SINK.sub(BLACKHOLE, query)
    else:
        query = _SINK.sub(
            f"WITH ('connector' = 'filesystem', 'format' = 'csv', 'path' = '{sink}')", query
        )
    return ddl + "\n" + query


def statements(text: str) -> list[str]:
    """The statements of a script (comment lines dropped; no query text has ';' in a string)."""
    lines = [line.split("--", 1)[0] for line in text.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def run_query(t_env, text: str) -> None:
    """Declare the tables, then run the INSERT to its end."""
    for statement in statements(text):
        result = t_env.execute_sql(statement)
        if statement.upper().startswith("INSERT"):
            result.wait()


def table_env(streaming: bool, parallelism: int, jar: Path | None):
    """A fresh TableEnvironment (one job per environment) in the mode asked, with the
    Parquet format jar on its class path."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    mode = EnvironmentSettings.in_streaming_mode() if streaming else None
    t_env = TableEnvironment.create(mode or EnvironmentSettings.in_batch_mode())
    config = t_env.get_config()
    config.set("parallelism.default", str(parallelism))
    config.set("table.local-time-zone", "UTC")
    if jar is not None:  # the format jar and the Hadoop jars beside it
        jars = sorted(jar.parent.glob("*.jar"))
        config.set("pipeline.jars", ";".join(j.resolve().as_uri() for j in jars))
    return t_env


def flink_error(exc: Exception) -> str:
    """Flink's own message from a Py4J error (its last 'Exception:' line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if "Exception:" in line]
    return (causes[-1] if causes else lines[0] if lines else repr(exc))[:600]


def run_one(name: str, args, ddl: str) -> dict:
    """The timed streaming run into the blackhole, then the untimed batch check."""
    query_dir, data, out = Path(args.query_dir), Path(args.data), Path(args.out)
    jar = Path(args.parquet_jar) if args.parquet_jar else None
    query = (query_dir / f"{name}.sql").read_text()
    source = "parquet" if jar else "csv"
    entry: dict = {"query": name, "mode": "streaming", "source": source}
    runs = []
    for _ in range(max(1, args.repeat)):
        t_env = table_env(True, args.parallelism, jar)
        started = time.perf_counter()
        try:
            run_query(t_env, flink_text(ddl, query, data, None, jar is not None))
        except Exception as exc:  # Flink's errors arrive as Py4J errors: report, go on
            return {**entry, "status": "failed", "reason": flink_error(exc)}
        runs.append(time.perf_counter() - started)
    entry.update(status="ran", seconds=statistics.median_low(runs))
    if len(runs) > 1:
        entry["runs"] = runs
    if args.no_check:
        return entry
    t_env = table_env(False, args.parallelism, jar)
    try:
        run_query(t_env, flink_text(ddl, query, data, out / name, jar is not None))
    except Exception as exc:
        return {**entry, "check": "failed", "check_reason": flink_error(exc)}
    return {**entry, "check": "ran"}


def warm_up(name: str, args, ddl: str) -> None:
    """Run ``name`` once in streaming mode over ``--warmup-data`` into the blackhole,
    untimed: the JVM's JIT, class loading and the first mini-cluster are then paid by
    no timed query, as headwater's and Spark's warm-ups spare theirs. A failure here
    is the timed run's to report."""
    jar = Path(args.parquet_jar) if args.parquet_jar else None
    query = (Path(args.query_dir) / f"{name}.sql").read_text()
    text = flink_text(ddl, query, Path(args.warmup_data), None, jar is not None)
    started = time.perf_counter()
    entry: dict = {"warmup": name}
    try:
        run_query(table_env(True, args.parallelism, jar), text)
    except Exception as exc:  # noqa: BLE001 - the timed run reports Flink's error
        entry.update(status="failed", reason=flink_error(exc))
    else:
        entry.update(status="ran", seconds=time.perf_counter() - started)
    print(json.dumps(entry))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flink_nexmark", description=__doc__)
    p.add_argument("--data", required=True, help="the generator's directory (Parquet, CSV)")
    p.add_argument("--query-dir", required=True, help="where qN.sql and ddl.sql are")
    p.add_argument("--out", required=True, help="one check sink directory per query under it")
    p.add_argument("--queries", required=True, help="comma-separated")
    p.add_argument("--parallelism", type=int, default=2, help="Flink's default parallelism")
    p.add_argument("--parquet-jar", help="flink-sql-parquet's jar (None: the CSV sources)")
    p.add_argument("--no-check", action="store_true", help="only the timed streaming runs")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per query (the median)")
    p.add_argument(
        "--warmup-data",
        help="a small generator directory: the first query runs once over it, untimed, first",
    )
    args = p.parse_args(argv)
    ddl = (Path(args.query_dir) / "ddl.sql").read_text()
    names = [q.strip() for q in args.queries.split(",") if q.strip()]
    if args.warmup_data and names:
        warm_up(names[0], args, ddl)
    for name in names:
        print(json.dumps(run_one(name, args, ddl)))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
