"""``headwater nexmark generate``: write NEXMark events as files."""

from __future__ import annotations

import argparse
import sys

from headwater.nexmark.config import BASE_TIME, NexmarkConfig
from headwater.nexmark.generator import generate
from headwater.nexmark.output import FORMATS, write


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headwater nexmark",
        description="NEXMark: generate the auction benchmark's events (docs/nexmark.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser(
        "generate",
        help="write person/auction/bid events as Parquet, replay or CSV files",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    gen.add_argument("--events", type=int, required=True, help="number of events to generate")
    gen.add_argument("--out", required=True, help="output directory (created if missing)")
    gen.add_argument("--seed", type=int, default=0, help="random seed (same seed, same events)")
    gen.add_argument(
        "--format",
        default=",".join(FORMATS),
        help=f"comma-separated output formats among {', '.join(FORMATS)}",
    )
    gen.add_argument(
        "--out-of-order-ms",
        type=int,
        default=0,
        help="delay each event's arrival by a seeded uniform 0..D ms (0: event-time order)",
    )
    gen.add_argument(
        "--events-per-file", type=int, default=10_000, help="events per Parquet file step"
    )
    gen.add_argument(
        "--watermark-every-ms",
        type=int,
        default=1000,
        help="arrival-time interval between the replay files' watermarks",
    )
    gen.add_argument(
        "--step-ms",
        type=int,
        default=100,
        help="the replay files' processing-time step: arrivals rounded up to it",
    )
    gen.add_argument(
        "--rate", type=int, default=10_000, help="events per second of event time (first rate)"
    )
    gen.add_argument("--base-time", default=BASE_TIME, help="event time of the first event")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    try:
        config = NexmarkConfig(
            events=args.events,
            seed=args.seed,
            first_event_rate=args.rate,
            base_time=args.base_time,
            out_of_order_ms=args.out_of_order_ms,
        )
        events = generate(config)
        written = write(
            events,
            args.out,
            formats,
            args.events_per_file,
            args.watermark_every_ms,
            args.step_ms,
        )
    except ValueError as exc:
        print(f"headwater nexmark: {exc}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{name} {table.num_rows}" for name, table in events.tables.items())
    print(
        f"generated {events.events} events ({counts}) in {events.seconds:.2f}s: "
        f"{events.events_per_second:,.0f} events/s"
    )
    for fmt, paths in written.items():
        print(f"{fmt}: {len(paths)} file(s) under {args.out}")
    return 0
