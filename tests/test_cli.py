"""The `headwater` command: a light `--help`, and every option of every subcommand
documented with its default."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from headwater.cli import COMMANDS

HEAVY = ("pyspark", "pandas", "duckdb", "pyarrow", "sqlglot")


def _imported_by(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has imported after running ``code``."""
    probe = f"import sys\n{code}\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    last = done.stdout.rstrip("\n").rpartition("\n")[2]
    return [m for m in last.split(",") if m]


def test_help_imports_no_heavy_module():
    code = (
        "import runpy, contextlib, io\n"
        "sys.argv = ['headwater', '--help']\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        runpy.run_module('headwater', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'COMMAND' in out.getvalue(), out.getvalue()"
    )
    assert _imported_by(code) == []


@pytest.mark.parametrize("command", ["sql", "experiment"])
def test_command_help_imports_no_heavy_module(command):
    """``headwater COMMAND --help`` prints its options without importing pandas,
    PySpark, DuckDB or sqlglot (they cost seconds)."""
    code = (
        "import contextlib, io\n"
        "from headwater.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        f"        main([{command!r}, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"assert 'usage: headwater {command}' in out.getvalue(), out.getvalue()"
    )
    assert _imported_by(code) == []


def test_import_headwater_is_light_and_names_resolve():
    assert _imported_by("import headwater as hw") == []
    assert "pandas" in _imported_by("import headwater as hw\nhw.from_pandas")


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser_of(func, argv: list[str], monkeypatch) -> argparse.ArgumentParser:
    """The parser ``func(argv)`` builds: stopped when it starts parsing."""

    def capture(self, args=None, namespace=None):
        raise _Parsed(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        try:
            func(argv)
        except _Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{func.__module__}.main({argv}) parsed no arguments")


def _entry_points() -> list[tuple[str, str, list[str]]]:
    """(command line, module, argv of its main) of every subcommand, and of every
    nested one of a command whose module lists them (``available()``)."""
    found = []
    for name, (module_name, _, _) in COMMANDS.items():
        module = importlib.import_module(module_name)
        nested = getattr(module, "available", None)
        if callable(nested):
            found += [(f"{name} {sub}", module_name, [sub, "--help"]) for sub in nested()]
        else:
            found.append((name, module_name, ["--help"]))
    return found


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and its subparsers, at any depth."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _parsers(sub)
    return out


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    shows_defaults = issubclass(parser.formatter_class, argparse.ArgumentDefaultsHelpFormatter)
    missing = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = "/".join(action.option_strings) or action.dest
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{name}: no help")
        elif action.option_strings and not (shows_defaults or "default" in action.help.lower()):
            missing.append(f"{name}: its default is not shown")
    return missing


ENTRY_POINTS = _entry_points()


def test_the_commands_are_walked():
    walked = {line.split()[0] for line, _, _ in ENTRY_POINTS}
    assert walked == set(COMMANDS)
    assert len(ENTRY_POINTS) > len(COMMANDS)  # bench's benchmarks too


@pytest.mark.parametrize(("line", "module_name", "argv"), ENTRY_POINTS, ids=lambda v: str(v))
def test_every_option_has_help_and_default(line, module_name, argv, monkeypatch):
    main = importlib.import_module(module_name).main
    parser = _parser_of(main, argv, monkeypatch)
    missing = [f"headwater {line}: {m}" for p in _parsers(parser) for m in _undocumented(p)]
    assert not missing, "\n".join(missing)
    assert parser.format_help()  # renders (a bad %-format in a help string fails here)
