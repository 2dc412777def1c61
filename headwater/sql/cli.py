"""``headwater sql``: run a query or a script, over recorded streams or files.

    headwater sql "QUERY" --replay Bid=bids.jsonl --event-time Bid.bidtime \\
                  [--as-of 2020-04-15T08:13:00] [--format csv|table|json] [--runner local|spark]
    headwater sql -f pipeline.sql [--runner local|spark]

Without EMIT STREAM it prints the table view as of ``--as-of`` (default: after
the last replay line, with no extra watermark); with EMIT STREAM the changelog
up to then. A bad query or a bad replay line exits with status 2 and the
error, with its position, on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `headwater sql --help` stays fast
    import pandas as pd


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headwater sql",
        description="Run streaming SQL over recorded streams (replay files) or tables.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("query", nargs="?", help="the query (or use -f)")
    p.add_argument("-f", "--file", help="a SQL script: CREATE TABLE ..., queries, INSERT INTO")
    p.add_argument(
        "--replay",
        action="append",
        default=[],
        metavar="TABLE=FILE.jsonl",
        help="read table TABLE from a replay file (rows with their arrival; repeatable)",
    )
    p.add_argument(
        "--event-time",
        action="append",
        default=[],
        metavar="TABLE.COLUMN",
        help="the event-time column of a replayed table (repeatable)",
    )
    p.add_argument(
        "--lateness",
        action="append",
        default=[],
        metavar="TABLE=DURATION",
        help="allowed lateness of a table's data, e.g. Bid='5 minutes' (none given: 0)",
    )
    p.add_argument(
        "--primary-key",
        action="append",
        default=[],
        metavar="TABLE=COL[,COL]",
        help="the primary key of a replayed table, what its rows are versions of "
        "(a temporal join: FOR SYSTEM_TIME AS OF), e.g. Rates=currency",
    )
    p.add_argument(
        "--as-of",
        help="processing time of the table view, ISO (none: after all the input)",
    )
    p.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="output format"
    )
    p.add_argument(
        "--dead-letters",
        metavar="PATH",
        help="write the input rows the query dropped: a CSV file; with -f, a directory "
        "(Parquet, one directory per query)",
    )
    p.add_argument(
        "--function",
        action="append",
        default=[],
        metavar="NAME=MODULE.ATTR",
        help="a Python function the queries call as NAME (a headwater.sql.function; repeatable)",
    )
    p.add_argument(
        "--state-ttl",
        metavar="DURATION",
        help="drop a key's state once no row of it arrived for DURATION of processing "
        "time, e.g. '1 hour' (queries whose state grows with their key's values; none: "
        "keep it)",
    )
    p.add_argument(
        "--no-fast-path",
        dest="fast_path",
        action="store_false",
        help="run every query on the general path, even a windowed aggregate the fast "
        "path takes (the same results; to compare the two, or to rule the fast path out)",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="print how the query runs (its stages, keys, state growth and path) "
        "instead of running it",
    )
    p.add_argument(
        "--runner",
        choices=("local", "spark"),
        default="local",
        help="local: DuckDB in this process; spark: a local Spark session",
    )
    p.add_argument(
        "--checkpoint", help="checkpoint directory of a script's streaming INSERT INTO (Spark)"
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep a streaming INSERT INTO running (else: stop when the files are processed)",
    )
    return p


def _pairs(values: list[str], sep: str, what: str) -> dict[str, str]:
    from headwater.sql.errors import SqlError

    out = {}
    for value in values:
        if sep not in value:
            raise SqlError(f"{what} {value!r}: expected TABLE{sep}VALUE")
        name, _, rest = value.partition(sep)
        out[name.strip()] = rest.strip()
    return out


def _tables(args: argparse.Namespace) -> dict:
    from headwater.sql.errors import SqlError
    from headwater.sql.execute.replay import read_replay

    replays = _pairs(args.replay, "=", "--replay")
    event_times = _pairs(args.event_time, ".", "--event-time")
    lateness = {k: _duration(v, k) for k, v in _pairs(args.lateness, "=", "--lateness").items()}
    keys = {k: v.split(",") for k, v in _pairs(args.primary_key, "=", "--primary-key").items()}
    for flag, given in (("--event-time", event_times), ("--lateness", lateness),
                        ("--primary-key", keys)):  # fmt: skip
        unknown = sorted(given.keys() - replays.keys())
        if unknown:  # a misspelt table: said before "no event-time column" of the right one
            value = ".COLUMN" if flag == "--event-time" else "=..."
            raise SqlError(
                f"{flag} {unknown[0]}{value}: no --replay {unknown[0]}=FILE",
                hint=f"Name a replayed table ({', '.join(sorted(replays)) or 'none given'}), "
                f"or replay it: --replay {unknown[0]}=FILE --event-time {unknown[0]}.COLUMN",
            )
    tables = {}
    for name, path in replays.items():
        if name not in event_times:
            raise SqlError(
                f"--replay {name}: no event-time column given",
                hint=f"Add --event-time {name}.COLUMN",
            )
        tables[name] = read_replay(
            path, name, event_times[name], None, lateness.get(name, 0), keys.get(name, ())
        )
    return tables


def _functions(args: argparse.Namespace) -> dict:
    """The ``--function NAME=MODULE.ATTR`` functions, by name."""
    from headwater.sql.plan.functions import import_function

    pairs = _pairs(args.function, "=", "--function")
    return {n: import_function(n, p, f"--function {n}") for n, p in pairs.items()}


def _duration(text: str, table: str) -> int:
    from headwater.model.time import to_millis
    from headwater.sql.errors import SqlError

    try:
        millis = to_millis(text)
    except (TypeError, ValueError):
        raise SqlError(
            f"--lateness {table}={text}: not a duration",
            hint="Write a duration such as '5 minutes' or '30 seconds'",
        ) from None
    if millis < 0:
        raise SqlError(
            f"--lateness {table}={text}: the allowed lateness must not be negative",
            hint="Write a duration such as '5 minutes', or 0 for none",
        )
    return millis


def render(frame: pd.DataFrame, fmt: str) -> str:
    """A result as CSV (header, ISO timestamps), JSON lines, or an aligned table."""
    import numpy as np
    import pandas as pd

    out = frame.copy()
    for column in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[column]):
            out[column] = out[column].map(_iso)
    if fmt == "csv":
        return out.to_csv(index=False)
    if fmt == "json":
        return out.to_json(orient="records", lines=True, date_format="iso")
    if "undo" in out.columns:
        out["undo"] = np.where(out["undo"].astype(bool), "undo", "")
    text = out.astype(object).where(out.notna(), "NULL").astype(str)
    widths = [max([len(c), *map(len, text[c])]) for c in text.columns]
    rows = [_line(text.columns, widths), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    rows += [_line(r, widths) for r in text.itertuples(index=False, name=None)]
    return "\n".join(rows) + "\n"


def _line(cells, widths: list[int]) -> str:
    return "| " + " | ".join(s.ljust(w) for s, w in zip(cells, widths, strict=True)) + " |"


def _iso(value) -> str:
    import pandas as pd

    if pd.isna(value):
        return ""
    ts = pd.Timestamp(value)
    return ts.isoformat(timespec="milliseconds" if ts.microsecond else "seconds")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)  # --help exits here, before the heavy imports
    from headwater.sql.errors import SqlError
    from headwater.sql.execute.replay import millis
    from headwater.sql.parse.ddl import state_ttl_ms

    try:
        as_of = None if args.as_of is None else millis(args.as_of, "--as-of")
        ttl = args.state_ttl
        if ttl is not None:
            state_ttl_ms(ttl, "--state-ttl")  # refused naming the flag, before anything runs
        if args.file:
            from headwater.sql.script import run_script

            if args.explain:
                raise SqlError("--explain takes a query, not a script (-f)")
            with open(args.file, encoding="utf-8") as fh:
                text = fh.read()
            options = {
                "checkpoint": args.checkpoint,
                "follow": args.follow,
                "as_of": as_of,
                "state_ttl": ttl,
                "fast_path": args.fast_path,
            }
            letters = ScriptDeadLetters(args.dead_letters)
            scripted = run_script(
                text,
                _tables(args),
                runner=args.runner,
                dead_letters=letters,
                functions=_functions(args),
                **options,
            )
            for frame in scripted:
                sys.stdout.write(render(frame, args.format))
            letters.report()
            return 0
        if not args.query:
            raise SqlError("give a query, or a script with -f FILE")
        from headwater.sql.bind import bind

        query = bind(
            args.query,
            _tables(args),
            runner=args.runner,
            functions=_functions(args),
            state_ttl=ttl,
            fast_path=args.fast_path,
        )
        if args.explain:
            sys.stdout.write(query.explain() + "\n")
            return 0
        sys.stdout.write(render(query.to_pandas(as_of), args.format))
        _report_dead_letters(query.dead_letters(as_of), args.dead_letters)
        return 0
    except (SqlError, OSError) as exc:
        print(f"headwater sql: error: {exc}", file=sys.stderr)
        return 2


#: The reason counted for dead letters that a correction from an archive took in.
CORRECTED = "corrected from the archive"


def _counts(batch: Any) -> dict[str, int]:
    """Dead letters per reason (and how many were corrected) of a pandas frame or
    a Spark micro-batch."""
    import pandas as pd

    if not isinstance(batch, pd.DataFrame):  # corrections run on the local runner only
        return {r: int(n) for r, n in batch.groupBy("reason").count().collect() if n}
    counts = {str(r): int(n) for r, n in batch["reason"].value_counts().items() if n}
    if "corrected" in batch.columns and batch["corrected"].any():
        counts[CORRECTED] = int(batch["corrected"].sum())
    return counts


def _summary(counts: Mapping[str, int]) -> str:
    """``N input rows dropped (late: n, ...)``, and how many of them were corrected."""
    corrected = counts.get(CORRECTED, 0)
    dropped = {r: n for r, n in counts.items() if r != CORRECTED}
    reasons = ", ".join(f"{r}: {n}" for r, n in sorted(dropped.items()))
    text = f"{sum(dropped.values())} input rows dropped ({reasons})"
    return f"{text}, {corrected} of them {CORRECTED}" if corrected else text


class ScriptDeadLetters:
    """The dead letters of a script's queries: counted per query and reason, and
    with ``--dead-letters DIR`` written as Parquet, a directory per query (a
    ``batch_id=N`` directory per batch, so a re-run batch overwrites itself)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.counts: dict[str, Counter[str]] = {}

    def __call__(self, name: str) -> Callable[[Any, int], None]:
        target = None if self.directory is None else os.path.join(self.directory, name)

        def sink(batch: Any, batch_id: int) -> None:
            counts = _counts(batch)
            if not counts:
                return
            self.counts.setdefault(name, Counter()).update(counts)
            if target is not None:
                from headwater.io.sinks import parquet_sink

                parquet_sink(target)(batch, batch_id)

        return sink

    def report(self) -> None:
        """Input the script's queries dropped, on stderr, per query."""
        for name, counts in sorted(self.counts.items()):
            where = (
                f"written to {os.path.join(self.directory, name)}"
                if self.directory
                else "write them with --dead-letters DIR"
            )
            print(f"headwater sql: {name}: {_summary(counts)}; {where}", file=sys.stderr)


def _report_dead_letters(dead: pd.DataFrame, path: str | None) -> None:
    """Input the query dropped is never silent: counted on stderr, written to
    ``--dead-letters FILE`` (CSV) when given."""
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        dead.to_csv(path, index=False)
    if not len(dead):
        return
    where = f"written to {path}" if path else "write them with --dead-letters FILE"
    print(f"headwater sql: {_summary(_counts(dead))}; {where}", file=sys.stderr)
