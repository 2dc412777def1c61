"""docs/sql.md (and the README's SQL section) run as written.

* every ```python block of docs/sql.md runs, in order, in one namespace; a
  ```text block right after a ```python block is what that block prints;
* every ``$ headwater sql ...`` line of a ```console block runs (in this
  process, through ``headwater.cli.main``) and prints exactly the lines that
  follow it, up to the next ``$`` line (stdout, then stderr; trailing
  whitespace aside). ``$ NAME="..."`` lines set shell variables that later
  commands use as ``"$NAME"``;
* every ```sql block parses, and one that starts with ``-- docs/sql/FILE.sql``
  is that file's text;
* the flags the page documents are the command's flags.

Everything runs from a scratch directory that links ``tests/`` and ``docs/`` of
the checkout, so the paths of the page are relative to the repository root and
what the examples write (``tmp/sql-docs/...``) stays out of the checkout. Local
runner only: the Spark runner gives the same results (tests/sql/test_paper.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sql.md"
README = ROOT / "README.md"
FIXTURES = ROOT / "tests" / "sql" / "data" / "paper" / "expected.yaml"

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
#: Warnings Python shows a user by default (the others are hidden outside tests).
_HIDDEN = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int  # of the body's first line


@dataclass(frozen=True)
class Command:
    """One ``$ headwater ...`` example: the words it runs and what it prints."""

    where: str
    text: str
    argv: tuple[str, ...]
    expected: str


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [
        Block(m["info"].strip(), m["body"], text.count("\n", 0, m.start("body")) + 1)
        for m in _FENCE.finditer(text)
    ]


def shell_words(text: str, env: dict[str, str]) -> list[str]:
    """The words of a command as bash reads this page's commands: quotes,
    backslash-newline continuations, and "$NAME" inside double quotes."""
    words = shlex.split(text.replace("\\\n", ""))
    return [_VARIABLE.sub(lambda m: env[m[1] or m[2]], word) for word in words]


def _complete(text: str) -> bool:
    if text.endswith("\\"):
        return False
    try:
        shlex.split(text.replace("\\\n", ""))
    except ValueError:  # an open quote: the command goes on
        return False
    return True


def console_commands(path: Path) -> tuple[list[Command], dict[str, str], dict[str, str]]:
    """The commands of every ```console block, in order; the shell variables the
    page sets (each command sees those set before it) and their assignments as
    written."""
    commands: list[Command] = []
    env: dict[str, str] = {}
    assignments: dict[str, str] = {}
    for block in (b for b in blocks(path) if b.lang == "console"):
        lines = block.body.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise AssertionError(f"{path.name}:{block.line + i}: expected a '$ ' line")
            start, text = i, lines[i][2:]
            while not _complete(text):
                i += 1
                text += "\n" + lines[i]
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            words = shell_words(text, env)
            where = f"{path.relative_to(ROOT)}:{block.line + start}"
            if len(words) == 1 and _ASSIGNMENT.match(words[0]):
                assert not output, f"{where}: an assignment prints nothing"
                name, _, value = words[0].partition("=")
                env[name], assignments[name] = value, text
                continue
            assert words[:2] == ["headwater", "sql"], f"{where}: not a headwater sql command"
            commands.append(Command(where, text, tuple(words[1:]), "\n".join(output)))
    return commands, env, assignments


def _normalized(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def run_headwater(argv: tuple[str, ...]) -> tuple[int, str, list[str]]:
    """Exit status, stdout + stderr, and the warnings a user would see on stderr."""
    from headwater.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.simplefilter("always")
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse
            rc = int(exc.code or 0)
    shown = [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in caught
        if not issubclass(w.category, _HIDDEN)
    ]
    return rc, out.getvalue() + err.getvalue(), shown


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory that looks like the repository root."""
    path = tmp_path_factory.mktemp("sql-docs")
    for name in ("tests", "docs"):
        (path / name).symlink_to(ROOT / name, target_is_directory=True)
    return path


DOC_COMMANDS, DOC_ENV, DOC_ASSIGNMENTS = console_commands(DOC)
README_COMMANDS, _, _ = console_commands(README)


@pytest.mark.parametrize("command", DOC_COMMANDS + README_COMMANDS, ids=lambda c: c.where)
def test_console_example(command: Command, workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("COLUMNS", "80")  # argparse's line width
    rc, output, shown = run_headwater(command.argv)
    assert not shown, f"{command.where}: the command prints warnings: {shown}"
    assert _normalized(output) == _normalized(command.expected), command.where
    failed = command.expected.lstrip().startswith("headwater sql: error:")
    assert (rc == 2) if failed else (rc == 0), f"{command.where}: exit status {rc}"


def test_the_pages_have_examples() -> None:
    assert len(DOC_COMMANDS) >= 30
    assert README_COMMANDS
    assert len([b for b in blocks(DOC) if b.lang == "python"]) >= 8


def test_python_examples(workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    namespace: dict = {"__name__": "__docs__"}
    found = blocks(DOC)
    for block, after in zip(found, [*found[1:], None], strict=True):
        if block.lang != "python":
            continue
        # Padded so that a traceback names the line of the page.
        code = compile("\n" * (block.line - 1) + block.body, str(DOC), "exec")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)  # noqa: S102
        if after is not None and after.lang == "text":
            where = f"docs/sql.md:{block.line}"
            assert _normalized(printed.getvalue()) == _normalized(after.body), where


def test_sql_blocks_parse_and_scripts_are_the_files() -> None:
    from headwater.sql.parse.dialect import parse

    sql_blocks = [b for b in blocks(DOC) if b.lang == "sql"]
    files = []
    for block in sql_blocks:
        assert parse(block.body), f"docs/sql.md:{block.line}"
        first = block.body.splitlines()[0]
        if first.startswith("-- docs/sql/"):
            path = ROOT / first[3:].split()[0].rstrip(":")
            assert path.read_text(encoding="utf-8") == block.body, f"docs/sql.md:{block.line}"
            files.append(path)
    assert files, "the page shows its scripts"


def test_query7_is_the_fixture() -> None:
    """The page's Query 7 is the fixtures' runnable Query 7 (tests/sql/data/paper)."""
    cases = {c["name"]: c for c in yaml.safe_load(FIXTURES.read_text(encoding="utf-8"))}
    runnable = cases["paper_q7_table_813"]["query_runnable"]
    assert DOC_ENV["Q7"].strip() == runnable.rstrip(";").strip()
    printed = cases["paper_q7_table_813"]["query"]
    assert any(b.body.strip() == printed for b in blocks(DOC) if b.lang == "sql")


def test_links_within_the_page_resolve() -> None:
    text = DOC.read_text(encoding="utf-8")
    outside = _FENCE.sub("", text)
    headings = re.findall(r"^#+ (.+)$", outside, flags=re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
    links = set(re.findall(r"\]\(#([^)]+)\)", outside))
    assert links and links <= anchors, sorted(links - anchors)


def test_every_flag_is_documented() -> None:
    from headwater.sql.cli import parser

    text = DOC.read_text(encoding="utf-8")
    flags = [
        option
        for action in parser()._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    ]
    missing = [flag for flag in flags if f"`{flag}" not in text]
    assert not missing, f"docs/sql.md does not document {missing}"


def _bash_example(command: Command) -> str:
    """The page's shell text for ``command``: the assignments of the variables it
    uses, as written, then the command."""
    used = sorted({m[1] or m[2] for m in _VARIABLE.finditer(command.text)})
    return "\n".join([*(DOC_ASSIGNMENTS[name] for name in used), command.text])


#: The README's set-up step that puts ``headwater`` on the shell's PATH.
ACTIVATE = "source .venv/bin/activate"


def _without(directory: Path, path: str) -> str:
    """``path`` (a PATH) without ``directory``: the shell of a user who has not
    activated the environment."""
    kept = [p for p in path.split(os.pathsep) if p and Path(p).resolve() != directory.resolve()]
    return os.pathsep.join(kept)


@pytest.mark.parametrize(
    "command",
    [README_COMMANDS[0], next(c for c in DOC_COMMANDS if '"$Q7' in c.text)],
    ids=lambda c: c.where,
)
def test_commands_are_shell(command: Command, workdir: Path) -> None:
    """Pasted into bash after the README's set-up (``source .venv/bin/activate`` at
    the root of the checkout), a command does what the in-process run above does."""
    assert ACTIVATE in README.read_text(encoding="utf-8")
    bash = shutil.which("bash")
    venv = ROOT / ".venv"
    if bash is None or Path(sys.prefix).resolve() != venv.resolve():
        pytest.skip("needs bash and the checkout's .venv (bash scripts/setup.sh)")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = _without(venv / "bin", env.get("PATH", ""))
    script = f"{ACTIVATE}\ncd {shlex.quote(str(workdir))}\n{_bash_example(command)}"
    done = subprocess.run(
        [bash, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert _normalized(done.stdout + done.stderr) == _normalized(command.expected)
