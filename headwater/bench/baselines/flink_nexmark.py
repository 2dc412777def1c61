"""Apache Flink's own SQL over headwater's generated NEXMark events (the Flink baseline).

Run by ``headwater bench nexmark --engines ...,flink`` as a subprocess with the Python of
the Flink virtualenv (``scripts/flink.sh``), which holds PyFlink and not headwater: so this
file imports nothing of headwater and only the standard library at module level.

Each query is the text of ``tests/sql/nexmark/queries/qN.sql`` (Flink's own, with
headwater's connector clauses) given back Flink's connectors: the three sources read the
CSV files of ``headwater nexmark generate --format csv`` through the filesystem
connector, the sink is a filesystem CSV directory. Flink runs in batch mode over the
bounded files (the final table of each query, which headwater's final table must equal),
with ``parallelism.default`` = the cores given. One JSON object per query on stdout:
``{"query", "status": "ran"|"failed", "seconds", "reason"}``.
"""

from __future__ import annotations

import argparse
import json
import re
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


def flink_text(ddl: str, query: str, data: Path, sink: Path) -> str:
    """The query with Flink's filesystem connectors (and Java functions) in place of
    headwater's."""
    ddl = _SOURCE.sub(
        lambda m: (
            f"WITH ('connector' = 'filesystem', 'format' = 'csv', "
            f"'path' = '{data / (m.group(1) + '.csv')}')"
        ),
        _BARE_DATETIME.sub("`dateTime`", ddl),
    )
    query = _SIDE.sub(
        lambda m: (
            f"WITH ('connector' = 'filesystem', 'format' = 'csv', "
            f"'csv.ignore-parse-errors' = 'true', 'path' = '{data / (m.group(1) + '.csv')}')"
        ),
        query,
    )
    query = _PYTHON_FUNCTION.sub(_JAVA_FUNCTION, query)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flink_nexmark", description=__doc__)
    p.add_argument("--data", required=True, help="directory of person.csv, auction.csv, bid.csv")
    p.add_argument("--query-dir", required=True, help="where qN.sql and ddl.sql are")
    p.add_argument("--out", required=True, help="one sink directory per query under it")
    p.add_argument("--queries", required=True, help="comma-separated")
    p.add_argument("--parallelism", type=int, default=2, help="Flink's default parallelism")
    args = p.parse_args(argv)

    from pyflink.table import EnvironmentSettings, TableEnvironment

    query_dir, data, out = Path(args.query_dir), Path(args.data), Path(args.out)
    ddl = (query_dir / "ddl.sql").read_text()
    for name in [q.strip() for q in args.queries.split(",") if q.strip()]:
        t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
        config = t_env.get_config()
        config.set("parallelism.default", str(args.parallelism))
        config.set("table.local-time-zone", "UTC")
        text = flink_text(ddl, (query_dir / f"{name}.sql").read_text(), data, out / name)
        started = time.perf_counter()
        try:
            run_query(t_env, text)
        except Exception as exc:  # Flink's errors arrive as Py4J errors: report, go on
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            causes = [line for line in lines if "Exception:" in line]
            reason = causes[-1] if causes else lines[0] if lines else repr(exc)
            print(json.dumps({"query": name, "status": "failed", "reason": reason[:600]}))
        else:
            seconds = time.perf_counter() - started
            print(json.dumps({"query": name, "status": "ran", "seconds": seconds}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
