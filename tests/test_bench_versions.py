"""`headwater bench versions`: a benchmark of this checkout and of a git revision,
alternated, each run's wall and CPU seconds, never its timings' values."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.bench import versions

ROOT = Path(__file__).resolve().parents[1]
TINY = ["general", "--rows", "300", "--windows", "3", "--steps", "2", "--small", "20"]
TINY += ["--dedup-rows", "200", "--dedup-keys", "20", "--dedup-steps", "2"]
#: A path a module builds beside the package: ``parents[2] / "a" / "b/c"``.
BESIDE = re.compile(r'parents\[2\]((?:\s*/\s*"[^"]+")+)')


def _has_git_history() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    return done.returncode == 0


pytestmark = pytest.mark.skipif(not _has_git_history(), reason="needs this repository's git")


def _tracked(path: str) -> set[str]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", "HEAD", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_the_baseline_is_the_revisions_package(tmp_path) -> None:
    tree = versions.export("HEAD", tmp_path, "general")
    assert (tree / "headwater" / "__init__.py").is_file()
    assert not (tree / "tests").exists()  # general reads nothing outside the package


def test_the_baseline_has_every_file_its_benchmark_reads(tmp_path) -> None:
    tree = versions.export("HEAD", tmp_path, "nexmark")
    queries = "tests/sql/nexmark/queries"
    exported = {str(p.relative_to(tree)) for p in (tree / queries).rglob("*") if p.is_file()}
    assert exported == _tracked(queries) and "tests/sql/nexmark/queries/q18.sql" in exported
    assert not (tree / "tests" / "test_bench_versions.py").exists()  # only what it reads
    # The baseline's own nexmark module finds its queries in the baseline's tree.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = "from headwater.bench import nexmark; print(nexmark.QUERY_DIR)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    query_dir = Path(done.stdout.strip())
    assert query_dir.is_relative_to(tree.resolve()) and (query_dir / "ddl.sql").is_file()
    assert (versions.export("HEAD", tmp_path / "k", "kafka") / "scripts/kafka.sh").is_file()


def test_every_path_the_package_reads_beside_itself_is_exported() -> None:
    """A module that reads ``Path(__file__).resolve().parents[2] / "..."`` (outside
    the package) must have that path in ``READS``, or its baseline run fails."""
    found = set()
    for source in (ROOT / "headwater").rglob("*.py"):
        for parts in BESIDE.findall(source.read_text(encoding="utf-8")):
            found.add("/".join(re.findall(r'"([^"]+)"', parts)))
    assert "tests/sql/nexmark/queries" in found  # the scan sees the nexmark bench's
    exported = {path for paths in versions.READS.values() for path in paths}
    assert found <= exported, f"read beside the package but not exported: {found - exported}"


def test_a_run_imports_its_trees_package_from_a_checkouts_root(tmp_path, monkeypatch) -> None:
    """Started from this checkout's root, a run of another tree imports that tree's
    headwater (``python -m`` would put the root first on ``sys.path``)."""
    fake = tmp_path / "tree" / "headwater"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "cli.py").write_text(
        "import json, sys\nprint(json.dumps({'file': __file__, 'argv': sys.argv[1:]}))\n"
    )
    monkeypatch.chdir(ROOT)
    run = versions.run_once("fake", fake.parent, ["nexmark", "--events", "5"])
    assert Path(run.report["file"]).resolve() == (fake / "cli.py").resolve()
    assert run.report["argv"] == ["bench", "nexmark", "--events", "5", "--json"]


def test_a_revision_without_a_benchmarks_files_is_named(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(versions.READS, "nexmark", ("no/such/path",))
    with pytest.raises(RuntimeError, match="no/such/path"):
        versions.export("HEAD", tmp_path, "nexmark")


def test_both_versions_run_in_turn_with_their_cpu(tmp_path, capsys) -> None:
    assert versions.main(["--baseline", "HEAD", "--repeat", "2", "--json", "--", *TINY]) == 0
    out = json.loads(capsys.readouterr().out)
    order = [r["version"] for r in out["runs"]]
    assert order == ["HEAD", "current", "current", "HEAD"]  # alternated
    for run in out["runs"]:
        assert run["seconds"] > 0 and run["cpu_s"] > 0
    assert set(out["median"]) == {"HEAD", "current"}
    assert out["cpu_ratio"] > 0


def test_the_ratio_is_read_where_a_benchmark_puts_it() -> None:
    assert versions.ratio_of({"ratio": 1.5}) == 1.5
    assert versions.ratio_of({"results": [{"streaming": {"ratio": 0.9}}]}) == 0.9
    assert versions.ratio_of({"results": [{"bounded": {"ratio": 1.1}}]}) == 1.1
    assert versions.ratio_of({"results": []}) is None


def test_a_benchmarks_json_is_read_indented_or_one_a_line() -> None:
    indented = json.dumps({"queries": {"q18": {"rows": 3}}}, indent=2)
    assert versions.documents(indented + "\n") == [{"queries": {"q18": {"rows": 3}}}]
    assert versions.documents('{"a": 1}\n{"a": 2}\n') == [{"a": 1}, {"a": 2}]
    with pytest.raises(json.JSONDecodeError):
        versions.documents('{"a": 1}\nnot json\n')


def test_a_benchmark_must_be_named() -> None:
    with pytest.raises(SystemExit):
        versions.main(["--baseline", "HEAD"])
