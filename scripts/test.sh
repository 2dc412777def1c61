#!/usr/bin/env bash
# Run the test suite: sets up the environment, then pytest with the venv's Python.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k sessions -x`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

bash scripts/setup.sh

# PostgreSQL for the `postgres`-marked tests (they skip without it, fail under CI=true).
if [ -z "${HEADWATER_TEST_POSTGRES:-}" ]; then
  HEADWATER_TEST_POSTGRES="$(bash scripts/postgres.sh)" || HEADWATER_TEST_POSTGRES=""
fi
export HEADWATER_TEST_POSTGRES

# Kafka for the `kafka`-marked tests (likewise: they skip without it, fail under CI=true).
if [ -z "${HEADWATER_TEST_KAFKA:-}" ]; then
  HEADWATER_TEST_KAFKA="$(bash scripts/kafka.sh)" || HEADWATER_TEST_KAFKA=""
fi
export HEADWATER_TEST_KAFKA

# The JVMs the tests start (Spark's, the subprocesses', Flink's) compile with C1 only:
# a test's JVM lives minutes on tiny batches, where C2's compiler threads compete with
# the tests for two cores and win back little on such short runs.
case "${JAVA_TOOL_OPTIONS:-}" in
  *TieredStopAtLevel*) ;;
  *) export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:-} -XX:TieredStopAtLevel=1" ;;
esac
export PYSPARK_PYTHON="$root/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$root/.venv/bin/python"

set +e
# Two pytest workers (pytest-xdist), a module each at a time (--dist loadfile: a
# module's tests share their fixtures and its SparkSession): most of a Spark test's
# time is waiting on a micro-batch, so two fill two cores. HEADWATER_TEST_WORKERS=0
# runs in this process. --durations: the slowest tests, to keep the suite in budget.
workers="${HEADWATER_TEST_WORKERS:-2}"
"$root/.venv/bin/python" -m pytest -q --durations=25 -n "$workers" --dist loadfile "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest: no tests collected (treated as success)"
  rc=0
fi
exit "$rc"
