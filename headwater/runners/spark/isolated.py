"""Spark jobs in a process of their own, ended together with everything they start.

A driver started in a session (process group) of its own takes its JVM, a
``local-cluster``'s master, workers and executor JVMs, and its Python workers
into that group: on a timeout the whole group gets SIGKILL, so nothing is left
running and holding the machine's cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence


def job_env() -> dict[str, str]:
    """The environment of a child driver: this interpreter for its Python workers,
    and no ``SPARK_HOME``/``PYSPARK_SUBMIT_ARGS`` (the pip-installed PySpark sets
    up its own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def run_isolated(
    cmd: Sequence[str],
    *,
    timeout: float,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group and return its exit status and output;
    on a timeout, kill the group and raise :class:`subprocess.TimeoutExpired`
    (with the output so far). ``env``: variables set over :func:`job_env`'s."""
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env={**job_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(list(cmd), timeout, out, err) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)
