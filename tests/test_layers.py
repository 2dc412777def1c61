"""The import arrows between headwater's layers, read from the source with ``ast``.

The layers, lowest first: ``headwater.model`` (the engine-independent core: no
Spark, no runner), the runners, ``headwater.io`` (sources and sinks: they may
build on the model only, never on a runner's private formats), then the users
of all of them (``headwater.api``, the CLI). Every ``import`` statement counts,
wherever it is (inside functions and ``if TYPE_CHECKING:`` blocks too), and the
module import graph must have no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "headwater"

#: What the engine-independent core must never import.
MODEL_FORBIDDEN = (
    "headwater.runners",
    "headwater.io",
    "headwater.sql",
    "headwater.hybrid",
    "headwater.cli",
    "headwater.api",
    "pyspark",
)
#: The only parts of headwater that ``headwater.io`` may import.
IO_ALLOWED = ("headwater.model", "headwater.io")
#: The only parts of headwater that ``headwater.hybrid`` may import (never the CLI,
#: the fluent API or SQL: the hybrid path builds plans of the model itself).
HYBRID_ALLOWED = ("headwater.model", "headwater.runners", "headwater.io", "headwater.hybrid")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


SOURCES = _sources()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """``(imported name, line)`` for every import in the module, at any depth.

    ``from X import y`` yields ``X.y`` when that is a module of headwater (a
    submodule import), else ``X``. Relative imports are resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                if node.module:
                    base.append(node.module)
                module = ".".join(base)
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                out.append((full if full in SOURCES else module, node.lineno))
    return out


IMPORTS = {name: _imports(name, path) for name, path in SOURCES.items()}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _where(module: str, line: int) -> str:
    return f"{SOURCES[module].relative_to(PACKAGE.parent)}:{line}"


def _resolve(target: str) -> str | None:
    """The headwater module an import loads (``a.b.c`` -> ``a.b`` if ``c`` is a name)."""
    while target:
        if target in SOURCES:
            return target
        target = target.rpartition(".")[0]
    return None


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {name: {} for name in SOURCES}
    for name, imports in IMPORTS.items():
        for target, line in imports:
            if not _under(target, "headwater"):
                continue
            module = _resolve(target)
            if module is not None and module != name:
                graph[name].setdefault(module, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_sources_found():
    assert "headwater.model.reducer" in SOURCES and "headwater.io.replay" in SOURCES


def test_model_imports_no_runner_io_or_spark():
    bad = [
        f"{_where(name, line)}: {target}"
        for name, imports in IMPORTS.items()
        if _under(name, "headwater.model")
        for target, line in imports
        if any(_under(target, p) for p in MODEL_FORBIDDEN)
    ]
    assert not bad, "headwater.model must not import these:\n" + "\n".join(bad)


def test_io_imports_only_the_model():
    bad = [
        f"{_where(name, line)}: {target}"
        for name, imports in IMPORTS.items()
        if _under(name, "headwater.io")
        for target, line in imports
        if _under(target, "headwater") and not any(_under(target, p) for p in IO_ALLOWED)
    ]
    assert not bad, "headwater.io may import headwater.model only:\n" + "\n".join(bad)


def test_hybrid_imports_only_lower_layers():
    bad = [
        f"{_where(name, line)}: {target}"
        for name, imports in IMPORTS.items()
        if _under(name, "headwater.hybrid")
        for target, line in imports
        if _under(target, "headwater") and not any(_under(target, p) for p in HYBRID_ALLOWED)
    ]
    assert not bad, "headwater.hybrid may import model, runners and io only:\n" + "\n".join(bad)


#: The only parts of headwater that ``headwater.nexmark`` (the NEXMark generator)
#: may import: the CLI and the bench build on it, never the reverse.
NEXMARK_ALLOWED = ("headwater.model", "headwater.io", "headwater.nexmark")


def test_nexmark_imports_only_model_and_io():
    bad = [
        f"{_where(name, line)}: {target}"
        for name, imports in IMPORTS.items()
        if _under(name, "headwater.nexmark")
        for target, line in imports
        if _under(target, "headwater") and not any(_under(target, p) for p in NEXMARK_ALLOWED)
    ]
    assert not bad, "headwater.nexmark may import model and io only:\n" + "\n".join(bad)
    assert any(_under(name, "headwater.nexmark") for name in IMPORTS)


#: What ``headwater.sql`` may import: it is a front end over the runners, as the
#: fluent API is (never the CLI or the hybrid path).
SQL_ALLOWED = ("headwater.model", "headwater.runners", "headwater.io", "headwater.sql")


def test_sql_imports_only_lower_layers():
    bad = [
        f"{_where(name, line)}: {target}"
        for name, imports in IMPORTS.items()
        if _under(name, "headwater.sql")
        for target, line in imports
        if _under(target, "headwater") and not any(_under(target, p) for p in SQL_ALLOWED)
    ]
    assert not bad, "headwater.sql may import model, runners and io only:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = _graph()
    cycles = _cycles(graph)
    report = []
    for component in cycles:
        members = set(component)
        report.append(" <-> ".join(component))
        for v in component:
            for w, line in sorted(graph[v].items()):
                if w in members:
                    report.append(f"    {_where(v, line)}: imports {w}")
    assert not cycles, "import cycles among headwater's modules:\n" + "\n".join(report)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}, [["a", "b", "c"]]),
        ({"a": {"b": 1}, "b": {"a": 1}, "c": {"c": 1}}, [["a", "b"]]),
    ],
)
def test_cycle_finder(graph, expected):
    assert _cycles(graph) == expected


def _private_imports(path: Path) -> list[str]:
    """``from headwater.x import _name``: a private name reached from another module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"line {node.lineno}: from {node.module} import {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("headwater")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_no_private_names_across_modules():
    """A name with a leading underscore belongs to its module: another module that
    needs it wants a public, documented name instead."""
    tests = PACKAGE.parent / "tests"
    paths = [*SOURCES.values(), *sorted(tests.rglob("*.py"))]
    bad = [f"{p.relative_to(PACKAGE.parent)} {hit}" for p in paths for hit in _private_imports(p)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


#: The stages of a SQL query, in order; each may import the earlier ones (and
#: ``headwater.sql.errors``), never a later one or the front end above them
#: (``headwater.sql`` itself, its CLI, scripts and binding).
SQL_STAGES = ("parse", "plan", "maintain", "execute")


@pytest.mark.parametrize("stage", SQL_STAGES)
def test_sql_stages_import_only_earlier_stages(stage: str):
    package = f"headwater.sql.{stage}"
    allowed = (
        "headwater.sql.errors",
        *(f"headwater.sql.{s}" for s in SQL_STAGES[: SQL_STAGES.index(stage) + 1]),
    )
    bad = [
        f"{_where(name, line)}: {target}"
        for name, imports in IMPORTS.items()
        if _under(name, package)
        for target, line in imports
        if _under(target, "headwater.sql") and not any(_under(target, p) for p in allowed)
    ]
    assert not bad, f"{package} may import {', '.join(allowed)} only:\n" + "\n".join(bad)
