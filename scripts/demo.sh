#!/usr/bin/env bash
# Set up the environment and run headwater's main job (`headwater demo`) on local Spark.
# Extra arguments go to `headwater demo`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

bash scripts/setup.sh

export PYSPARK_PYTHON="$root/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$root/.venv/bin/python"

exec "$root/.venv/bin/headwater" demo "$@"
