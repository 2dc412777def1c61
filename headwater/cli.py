"""The `headwater` command.

Each subcommand is implemented by a `main(argv) -> int | None` function in its own
module, imported only when that subcommand runs (importing PySpark or Beam costs
seconds, and `headwater --help` should not pay for it). Everything after the
subcommand name is handed to that function unchanged, so each implementation owns
its own options and `--help`.

A new subcommand is one entry of `COMMANDS`. A command with subcommands of its own
(`headwater bench NAME`) lists them with an `available() -> list[str]` function in
its module; tests/test_cli.py walks them all and checks that every option has help
and shows its default (argparse.ArgumentDefaultsHelpFormatter).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from headwater import __version__

# name -> (implementing module, one-line help, usage hint)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": (
        "headwater.examples.demo",
        "run the main example job on local Spark",
        "[options]",
    ),
    "transcripts": (
        "headwater.testing.transcripts",
        "run windowing/trigger conformance transcripts",
        "FILE.yaml [FILE.yaml ...] [--runner local|spark]",
    ),
    "sql": (
        "headwater.sql.cli",
        "run streaming SQL over recorded streams or tables",
        '"QUERY" --replay T=FILE --event-time T.COL | -f FILE.sql',
    ),
    "bench": (
        "headwater.bench",
        "run the benchmarks (ratios against Spark-native)",
        "[options]",
    ),
    "nexmark": (
        "headwater.nexmark.cli",
        "generate NEXMark auction events (Parquet, replay, CSV)",
        "generate --events N --out DIR [options]",
    ),
    "experiment": (
        "headwater.hybrid.experiment_args",
        "run the hybrid-model experiment (HPM vs MP-K-slack and AQ-K-slack)",
        "hpm --profile game1|game2 --out DIR [options]",
    ),
}


def _parser() -> argparse.ArgumentParser:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_, _) in COMMANDS.items()]
    parser = argparse.ArgumentParser(
        prog="headwater",
        description="headwater: the Dataflow Model (windows, triggers, watermarks, "
        "retractions) on Apache Spark.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(lines)
        + "\n\nRun `headwater COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"headwater {__version__}")
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _load(command: str) -> Callable[[list[str]], int | None] | None:
    """Import the command's implementation; None (after a message) if it is missing."""
    module_name = COMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a missing headwater module is "not available"; a missing third-party
        # dependency inside an existing module is a real error and propagates.
        missing = exc.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            print(
                f"headwater {command}: not available in this installation "
                f"(module {module_name} not found)",
                file=sys.stderr,
            )
            return None
        raise
    func = getattr(module, "main", None)
    if not callable(func):
        print(f"headwater {command}: {module_name} has no main(argv) function", file=sys.stderr)
        return None
    return func


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        # --help, --version, no command, or an unknown command: argparse reports it.
        parser = _parser()
        if not argv:
            parser.print_help(sys.stderr)
            return 2
        parser.parse_args(argv)  # exits
        return 2
    command, rest = argv[0], argv[1:]
    func = _load(command)
    if func is None:
        return 2
    rc = func(rest)
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())
