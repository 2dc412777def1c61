"""The README's main job runs end to end (its own Spark in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_and_its_changelog_matches_the_input(tmp_path):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater",
            "demo",
            "--events",
            "200",
            # 30 s steps: a third of the micro-batches of the default 10 s, every
            # timing (early, on time, late) still met.
            "--step-seconds",
            "30",
            "--out",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "equals the input's totals: yes" in out.stdout
    for timing in ("EARLY", "ON_TIME", "LATE"):
        assert timing in out.stdout
    assert (tmp_path / "d" / "changelog").is_dir()
