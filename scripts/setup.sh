#!/usr/bin/env bash
# The one environment setup for headwater: Java 17 (for Spark), a .venv with
# headwater installed in editable mode plus its test extras.
#
# Idempotent and fast when nothing changed: the pip install is skipped when
# pyproject.toml and requirements.lock are unchanged since the last successful
# install (the lock pins every package's version) and the venv still imports
# headwater from this checkout. Set HEADWATER_FORCE_SETUP=1 to reinstall anyway.
# Exports nothing; callers use .venv/bin/* directly.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { echo "[setup] $*" >&2; }

# --- Java ------------------------------------------------------------------
if ! command -v java >/dev/null 2>&1; then
  log "java not found: installing openjdk-17-jre-headless"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      log "not root and no sudo: install Java 17 yourself (apt-get install openjdk-17-jre-headless)"
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends openjdk-17-jre-headless
fi
# Spark 4 needs Java 17 or newer; warn (do not fail) on anything older.
java_major="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n 1)"
if [ -n "$java_major" ] && [ "$java_major" -lt 17 ] 2>/dev/null; then
  log "warning: java $java_major found on PATH; Spark 4 needs Java 17+"
fi

# --- Python virtualenv -------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  py="${PYTHON:-python3}"
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    log "$py is older than 3.10; set PYTHON=/path/to/python3.10+"
    exit 1
  fi
  if ! "$py" -m venv .venv 2>/dev/null; then
    # Debian splits venv/ensurepip into a separate package.
    log "python venv module missing: installing python3-venv"
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q
    $sudo apt-get install -y -q python3-venv
    rm -rf .venv
    "$py" -m venv .venv
  fi
  log "created .venv with $("$py" --version 2>&1)"
fi

# --- headwater (editable) + test extras ---------------------------------------
stamp=.venv/.headwater-setup.sha256
want="$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)"
have="$(cat "$stamp" 2>/dev/null || true)"
# The installed package must resolve to this checkout (guards against a venv copied
# from elsewhere or an uninstalled package).
installed_here() {
  "$root/.venv/bin/python" - "$root" <<'PY' 2>/dev/null
import os, sys
import importlib.util
spec = importlib.util.find_spec("headwater")
ok = spec is not None and spec.origin is not None and os.path.realpath(spec.origin).startswith(
    os.path.realpath(sys.argv[1]) + os.sep)
sys.exit(0 if ok and os.path.exists(os.path.join(sys.prefix, "bin", "headwater")) else 1)
PY
}
if [ "${HEADWATER_FORCE_SETUP:-0}" != "1" ] && [ "$want" = "$have" ] && (cd /tmp && installed_here); then
  log "environment up to date"
else
  log "pip install -c requirements.lock -e '.[test]'"
  .venv/bin/python -m pip install -q --disable-pip-version-check -c requirements.lock -e '.[test]'
  echo "$want" > "$stamp"
  log "done"
fi

# --- PySpark's worker zips, compiled --------------------------------------------
# The wheel ships them as source, so every Python process Spark starts compiled
# PySpark again (transformWithStateInPandas starts one at each query start): see
# headwater/runners/spark/bytecode.py. Does nothing once they are compiled.
.venv/bin/python -m headwater.runners.spark.bytecode | sed 's/^/[setup] /' >&2
