#!/usr/bin/env bash
# Apache Flink (PyFlink) for the NEXMark baseline, in a virtualenv of its own.
#
#   python="$(bash scripts/flink.sh)"   # create once if needed; prints the venv's python
#   bash scripts/flink.sh status        # prints it when PyFlink imports, else exit 3
#
# PyFlink pins its own dependencies (apache-beam, pyarrow, pandas, numpy ...) at versions
# that conflict with headwater's requirements.lock, so it never shares the main .venv: it
# lives in a cache folder outside the checkout, created once (a second run and every
# test run work offline), at an exact version: apache-flink $HEADWATER_FLINK (default
# 2.3.0: Python 3.9-3.12, Java 11/17/21; the JVM it starts is the `java` on PATH, the
# Java 17 Spark uses). `headwater bench nexmark --engines ...,flink --flink-python P`
# runs headwater/bench/baselines/flink_nexmark.py with it. Only the result goes to stdout.
#
# PyFlink ships no Parquet format: its format jar (org.apache.flink:flink-sql-parquet, the
# same version) and the Hadoop client it needs are fetched once from Maven Central with
# `mvn` into $cache/flink-sql-parquet-$version/ (a second run downloads nothing), where
# headwater/bench/baselines/nexmark_flink.py finds them for the Parquet sources.
#
#   bash scripts/flink.sh jar           # fetch once if needed; prints the jar's path
set -euo pipefail

version="${HEADWATER_FLINK:-2.3.0}"
cache="${HEADWATER_CACHE:-$HOME/.cache/headwater}"
venv="$cache/flink-$version"
python="$venv/bin/python"
jar_dir="$cache/flink-sql-parquet-$version"
jar="$jar_dir/flink-sql-parquet-$version.jar"
# flink-sql-parquet reads through Hadoop's Configuration, which neither it nor PyFlink
# ships: the shaded Hadoop client (api + runtime) beside it, every jar of the folder on
# the job's class path.
hadoop="${HEADWATER_FLINK_HADOOP:-3.3.6}"
action="${1:-install}"

log() { echo "[flink] $*" >&2; }

ready() { [ -f "$venv/.installed" ] && "$python" -c 'import pyflink.table' 2>/dev/null; }

# The Parquet format jar and the Hadoop client it loads classes from, once (a second run
# finds .complete and downloads nothing).
# shellcheck source=scripts/maven.sh
. "$(dirname "${BASH_SOURCE[0]}")/maven.sh"
fetch_jar() {
  fetch "$jar_dir" "org.apache.flink:flink-sql-parquet:$version" \
    "org.apache.hadoop:hadoop-client-api:$hadoop" \
    "org.apache.hadoop:hadoop-client-runtime:$hadoop"
}

case "$action" in
  status)
    if ready && [ -f "$jar_dir/.complete" ]; then echo "$python"; exit 0; fi
    exit 3
    ;;
  jar)
    fetch_jar
    echo "$jar"
    exit 0
    ;;
  install) ;;
  *) log "usage: flink.sh [install|status|jar]"; exit 2 ;;
esac

fetch_jar
if ready; then
  echo "$python"
  exit 0
fi
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(not ((3, 9) <= sys.version_info[:2] <= (3, 12)))'; then
  log "$py is not Python 3.9-3.12 (PyFlink $version's range); set PYTHON=/path/to/python3.11"
  exit 1
fi
started=$SECONDS
rm -rf "$venv"
"$py" -m venv "$venv"
log "pip install apache-flink==$version into $venv"
# Every package at the version the tests ran with (scripts/flink.lock), for 2.3.0.
constraints=()
if [ "$version" = 2.3.0 ]; then
  constraints=(-c "$(dirname "${BASH_SOURCE[0]}")/flink.lock")
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${constraints[@]}" \
  "apache-flink==$version"
"$python" -c 'import pyflink.table' >&2
touch "$venv/.installed"
log "installed in $((SECONDS - started)) s"
echo "$python"
