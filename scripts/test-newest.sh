#!/usr/bin/env bash
# The README's and docs' examples on the NEWEST versions that pyproject.toml's bounds
# admit (scripts/setup.sh installs the exact versions of requirements.lock instead).
# A release inside the bounds that breaks an example fails here, before a user meets
# it. The environment is .venv-newest/, upgraded on every run (pip's cache keeps
# it cheap); extra arguments go to pytest.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

bash scripts/setup.sh >/dev/null  # Java, and python3 with venv, as for the main set-up
if [ ! -x .venv-newest/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv-newest
fi
echo "[newest] pip install --upgrade -e '.[test]' (no lock)" >&2
.venv-newest/bin/python -m pip install -q --disable-pip-version-check --upgrade -e '.[test]'
.venv-newest/bin/python -m pip freeze --exclude-editable |
  grep -iE '^(duckdb|sqlglot|pandas|pyarrow|numpy|pyspark)==' | tr '\n' ' ' >&2
echo >&2

export PYSPARK_PYTHON="$root/.venv-newest/bin/python"
export PYSPARK_DRIVER_PYTHON="$root/.venv-newest/bin/python"
exec .venv-newest/bin/python -m pytest -q -p no:cacheprovider tests/test_readme.py \
  tests/sql/test_docs.py "$@"
