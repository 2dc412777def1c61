"""The ``headwater experiment`` command line (:mod:`headwater.hybrid.experiment`
runs it): its arguments and the throughput settings they ask for, in a module
that imports neither pandas nor matplotlib, so that ``--help`` prints at once."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from headwater.hybrid.experiment_options import RUNNER_NAMES, Throughput


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headwater experiment",
        description="HPM against MP-K-slack and AQ-K-slack (docs/hybrid.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("experiment", choices=["hpm"], help="the experiment to run")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", choices=["game1", "game2"], help="a generated stream")
    src.add_argument("--input", help="your own stream: CSV or Parquet (see --event-time ...)")
    p.add_argument("--events", type=int, help="tuples to generate (None: the profile's)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the generated stream")
    p.add_argument("--shards", type=int, default=1, help="state shards of the stream module")
    p.add_argument(
        "--runner",
        choices=sorted(RUNNER_NAMES),
        default="spark",
        help="where the stream module runs",
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--work", help="work directory, emptied first (None: OUT/work)")
    for name, default in (("event-time", "ts"), ("arrival", "arrival"), ("key", "sensor")):
        p.add_argument(f"--{name}", default=default, help="--input's column")
    p.add_argument("--value", default="speed", help="--input's summed column")
    p.add_argument("--arrival-is-order", action="store_true", help="--arrival is a position")
    t = Throughput()
    p.add_argument("--throughput-shards", default="1,2,4", help="shard counts to time")
    p.add_argument(
        "--throughput-masters",
        default=";".join(t.masters),
        help="Spark masters to time on, separated by ';'",
    )
    p.add_argument("--throughput-events", type=int, default=t.events, help="tuples used")
    p.add_argument("--throughput-density", type=int, default=t.density, help="copies per tuple")
    p.add_argument("--throughput-repeats", type=int, default=t.repeats, help="runs per count")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # --help exits here, before the heavy imports
    from headwater.hybrid.experiment import THROUGHPUT_STEPS, Progress, run_experiment
    from headwater.hybrid.generator import generate, profile, read_stream

    if args.input:
        stream = read_stream(
            args.input,
            event_time=args.event_time,
            arrival=args.arrival,
            key=args.key,
            value=args.value,
            arrival_is_order=args.arrival_is_order,
        )
    else:
        stream = generate(profile(args.profile), seed=args.seed, events=args.events)
    throughput = Throughput(
        tuple(int(n) for n in args.throughput_shards.split(",")),
        tuple(m for m in args.throughput_masters.split(";") if m),
        args.throughput_events,
        args.throughput_density,
        args.throughput_repeats,
    )
    steps = 5 + THROUGHPUT_STEPS[args.runner](throughput)
    progress = Progress(steps, enabled=not args.no_progress)
    out = Path(args.out)
    result = run_experiment(
        stream,
        out,
        runner=args.runner,
        shards=args.shards,
        throughput=throughput,
        work=Path(args.work) if args.work else None,
        progress=progress,
    )
    print(json.dumps({k: v for k, v in result.items() if k != "settings"}, indent=2))
    print(f"wrote {out / 'metrics.json'} and plots in {os.fspath(out)}")
    return 0
