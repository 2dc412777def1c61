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
from collections.abc import Sequence

import numpy as np
import pandas as pd

from headwater.model.time import to_millis
from headwater.sql.errors import SqlError
from headwater.sql.replay import millis, read_replay


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headwater sql",
        description="Run streaming SQL over recorded streams (replay files) or tables.",
    )
    p.add_argument("query", nargs="?", help="the query (or use -f)")
    p.add_argument("-f", "--file", help="a SQL script: CREATE TABLE ..., queries, INSERT INTO")
    p.add_argument("--replay", action="append", default=[], metavar="TABLE=FILE.jsonl")
    p.add_argument("--event-time", action="append", default=[], metavar="TABLE.COLUMN")
    p.add_argument(
        "--lateness",
        action="append",
        default=[],
        metavar="TABLE=DURATION",
        help="allowed lateness of a table's data, e.g. Bid='5 minutes' (default 0)",
    )
    p.add_argument("--as-of", help="processing time of the table view (ISO timestamp)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument(
        "--dead-letters", metavar="FILE", help="write the input rows the query dropped (CSV)"
    )
    p.add_argument("--runner", choices=("local", "spark"), default="local")
    p.add_argument(
        "--checkpoint", help="checkpoint directory of a script's streaming INSERT INTO (Spark)"
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep a streaming INSERT INTO running (default: stop when the files are processed)",
    )
    return p


def _pairs(values: list[str], sep: str, what: str) -> dict[str, str]:
    out = {}
    for value in values:
        if sep not in value:
            raise SqlError(f"{what} {value!r}: expected TABLE{sep}VALUE")
        name, _, rest = value.partition(sep)
        out[name.strip()] = rest.strip()
    return out


def _tables(args: argparse.Namespace) -> dict:
    replays = _pairs(args.replay, "=", "--replay")
    event_times = _pairs(args.event_time, ".", "--event-time")
    lateness = {k: _duration(v, k) for k, v in _pairs(args.lateness, "=", "--lateness").items()}
    tables = {}
    for name, path in replays.items():
        if name not in event_times:
            raise SqlError(
                f"--replay {name}: no event-time column given",
                hint=f"Add --event-time {name}.COLUMN",
            )
        tables[name] = read_replay(path, name, event_times[name], None, lateness.get(name, 0))
    return tables


def _duration(text: str, table: str) -> int:
    try:
        return to_millis(text)
    except (TypeError, ValueError):
        raise SqlError(
            f"--lateness {table}={text}: not a duration",
            hint="Write a duration such as '5 minutes' or '30 seconds'",
        ) from None


def render(frame: pd.DataFrame, fmt: str) -> str:
    """A result as CSV (header, ISO timestamps), JSON lines, or an aligned table."""
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
    if pd.isna(value):
        return ""
    ts = pd.Timestamp(value)
    return ts.isoformat(timespec="milliseconds" if ts.microsecond else "seconds")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        as_of = None if args.as_of is None else millis(args.as_of, "--as-of")
        if args.file:
            from headwater.sql.script import run_script

            with open(args.file, encoding="utf-8") as fh:
                text = fh.read()
            options = {"checkpoint": args.checkpoint, "follow": args.follow, "as_of": as_of}
            for frame in run_script(text, _tables(args), runner=args.runner, **options):
                sys.stdout.write(render(frame, args.format))
            return 0
        if not args.query:
            raise SqlError("give a query, or a script with -f FILE")
        from headwater.sql.bind import bind

        query = bind(args.query, _tables(args), runner=args.runner)
        sys.stdout.write(render(query.to_pandas(as_of), args.format))
        _report_dead_letters(query.dead_letters(as_of), args.dead_letters)
        return 0
    except (SqlError, OSError) as exc:
        print(f"headwater sql: error: {exc}", file=sys.stderr)
        return 2


def _report_dead_letters(dead: pd.DataFrame, path: str | None) -> None:
    """Input the query dropped is never silent: counted on stderr, written to
    ``--dead-letters FILE`` (CSV) when given."""
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        dead.to_csv(path, index=False)
    if not len(dead):
        return
    reasons = ", ".join(f"{r}: {n}" for r, n in dead["reason"].value_counts().sort_index().items())
    where = f"written to {path}" if path else "write them with --dead-letters FILE"
    print(f"headwater sql: {len(dead)} input rows dropped ({reasons}); {where}", file=sys.stderr)
