"""Shared pytest fixtures.

`spark`: ONE SparkSession for the whole test session (starting a JVM costs
seconds; tests must not create or stop their own sessions). It runs on
local[2] with small shuffles, UTC session time, Arrow, and the RocksDB state
store provider, which is what headwater's streaming runner is meant to run on.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from headwater.io.kafka import cached_spark_jars
from headwater.io.sinks.delta import DELTA_SPARK_CONF, cached_delta_jars
from headwater.runners.spark.session import LOCAL_CHECKPOINT_CONF

# Spark's Python workers must run the interpreter running the tests (the venv's),
# whatever `python3` on PATH is. Set before any SparkSession starts.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

SPARK_TEST_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "headwater-tests",
    "spark.driver.memory": "1g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    # Streaming tests run many tiny queries; do not keep idle-state maintenance busy.
    "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
    "spark.sql.streaming.minBatchesToRetain": "10",
    **LOCAL_CHECKPOINT_CONF,
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """The test session's SparkSession (created on first use, stopped at the end)."""
    from pyspark.sql import SparkSession

    scratch = tmp_path_factory.mktemp("spark")
    builder = SparkSession.builder
    for key, value in SPARK_TEST_CONF.items():
        builder = builder.config(key, value)
    # Keep spark-warehouse/, metastore_db/ and derby.log out of the checkout.
    builder = builder.config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
    builder = builder.config("spark.local.dir", str(scratch / "local"))
    builder = builder.config(
        "spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch / 'derby'}"
    )
    # Spark's Kafka connector (local jars resolved by scripts/kafka.sh: offline here).
    # Delta's Spark connector too (scripts/kafka.sh delta-jars), to read Delta tables:
    # its reader needs Delta's session extension and catalog (other tables pass through).
    delta = cached_delta_jars()
    jars = ",".join(j for j in (cached_spark_jars(), delta) if j)
    if jars:
        builder = builder.config("spark.jars", jars)
    if delta:
        for key, value in DELTA_SPARK_CONF.items():
            builder = builder.config(key, value)
        # Tiny tables: replay the Delta log in 2 tasks, not 50.
        builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The test broker's address (HEADWATER_TEST_KAFKA, from scripts/kafka.sh), with
    Spark's Kafka connector resolved; missing: skip, or fail under CI, which must
    run the Kafka tests."""
    address = os.environ.get("HEADWATER_TEST_KAFKA", "").strip()
    if not address:
        if os.environ.get("CI"):
            pytest.fail("HEADWATER_TEST_KAFKA is not set: CI must run the Kafka tests")
        pytest.skip("HEADWATER_TEST_KAFKA is not set (export it from scripts/kafka.sh)")
    pytest.importorskip("confluent_kafka")
    if cached_spark_jars() is None:
        pytest.fail("Spark's Kafka connector is not resolved: run bash scripts/kafka.sh")
    return address


@pytest.fixture
def tmp_checkpoint(tmp_path: Path) -> str:
    """A fresh, empty checkpoint location (a path string) for one streaming query."""
    path = tmp_path / "checkpoint"
    return str(path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `beam`-marked tests when apache-beam is not installed (it is an extra)."""
    if importlib.util.find_spec("apache_beam") is not None:
        return
    skip = pytest.mark.skip(reason="apache-beam is not installed (pip install -e '.[test]')")
    for item in items:
        if "beam" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter) -> None:
    """Print how many bad-input cases ran (tests/bad_input/: one case a test id),
    and the streaming fuzzer's counts."""
    outcomes: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "tests/bad_input/" in getattr(report, "nodeid", "") and report.when in (
                "call",
                "setup",
            ):
                if outcome == "skipped" or report.when == "call":
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    if outcomes:
        total = sum(outcomes.values())
        parts = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
        terminalreporter.write_line(f"bad-input cases: {total} ({parts})")
    _fuzz_summary(terminalreporter)


def _fuzz_summary(terminalreporter) -> None:
    """Print how many queries the streaming fuzzer ran and how many were refused
    (each of its tests records them as ``fuzz_ran`` / ``fuzz_refused`` properties)."""
    fuzzed: Counter = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) == "call":
                fuzzed.update({k: v for k, v in report.user_properties if k.startswith("fuzz_")})
    if fuzzed:
        terminalreporter.write_line(
            f"streaming fuzzer (tests/sql/test_stream_vs_bounded.py): {fuzzed['fuzz_ran']} "
            f"queries ran, {fuzzed['fuzz_refused']} refused by the planner"
        )
