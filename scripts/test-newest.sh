#!/usr/bin/env bash
# The README's and docs' examples on the NEWEST versions that pyproject.toml's bounds
# admit (scripts/setup.sh installs the exact versions of requirements.lock instead).
# A release inside the bounds that breaks an example fails here, before a user meets
# it. The environment is .venv-newest/, upgraded on every run (pip's cache keeps
# it cheap); extra arguments go to pytest.
#
#   bash scripts/test-newest.sh            # install (upgrade), then run the examples
#   bash scripts/test-newest.sh --install  # install only (.ci/run does it in the background)
#   bash scripts/test-newest.sh --run      # run only, with the environment installed before
set -euo pipefail

mode=both
case "${1:-}" in
  --install) mode=install; shift ;;
  --run) mode=run; shift ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "$mode" != run ] || [ ! -f .venv-newest/.installed ]; then
  bash scripts/setup.sh >/dev/null  # Java, and python3 with venv, as for the main set-up
  if [ ! -x .venv-newest/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv-newest
  fi
  rm -f .venv-newest/.installed
  echo "[newest] pip install --upgrade -e '.[test]' (no lock)" >&2
  .venv-newest/bin/python -m pip install -q --disable-pip-version-check --upgrade -e '.[test]'
  touch .venv-newest/.installed
fi
.venv-newest/bin/python -m pip freeze --exclude-editable |
  grep -iE '^(duckdb|sqlglot|pandas|pyarrow|numpy|pyspark)==' | tr '\n' ' ' >&2
echo >&2
[ "$mode" = install ] && exit 0

export PYSPARK_PYTHON="$root/.venv-newest/bin/python"
export PYSPARK_DRIVER_PYTHON="$root/.venv-newest/bin/python"
exec .venv-newest/bin/python -m pytest -q -p no:cacheprovider tests/test_readme.py \
  tests/sql/test_docs.py "$@"
