"""`headwater bench versions`: a benchmark of this checkout and of a git revision,
alternated, each run's wall and CPU seconds, never its timings' values."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from headwater.bench import versions

ROOT = Path(__file__).resolve().parents[1]
TINY = ["general", "--rows", "300", "--windows", "3", "--steps", "2", "--small", "20"]
TINY += ["--dedup-rows", "200", "--dedup-keys", "20", "--dedup-steps", "2"]


def _has_git_history() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    return done.returncode == 0


pytestmark = pytest.mark.skipif(not _has_git_history(), reason="needs this repository's git")


def test_the_baseline_is_the_revisions_package(tmp_path) -> None:
    tree = versions.export("HEAD", tmp_path)
    assert (tree / "headwater" / "__init__.py").is_file()
    assert not (tree / "tests").exists()  # only the package a run imports


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


def test_a_benchmark_must_be_named() -> None:
    with pytest.raises(SystemExit):
        versions.main(["--baseline", "HEAD"])
