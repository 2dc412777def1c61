#!/usr/bin/env bash
# A throwaway PostgreSQL server for headwater's `postgres`-marked tests.
#
#   url="$(bash scripts/postgres.sh)"     # install if needed, init, start; prints the URL
#   bash scripts/postgres.sh stop         # stop it (the data directory is kept)
#   bash scripts/postgres.sh status
#
# Idempotent and safe to run twice: installs the Debian `postgresql` package only when
# no PostgreSQL server binaries are found, initializes a cluster once (in
# $HEADWATER_PG_DIR, default /tmp/headwater-pg: outside the checkout), starts it on
# 127.0.0.1:$HEADWATER_PG_PORT (default 54329) unless it is already running, and creates
# the database `headwater_test` if missing. Local connections are trusted (a test
# server, listening on the loopback interface only). As root the server runs as the
# `postgres` user (initdb refuses root). Only the URL goes to stdout; logs go to stderr:
#
#   postgresql://postgres@127.0.0.1:54329/headwater_test
set -euo pipefail

dir="${HEADWATER_PG_DIR:-/tmp/headwater-pg}"
port="${HEADWATER_PG_PORT:-54329}"
db="${HEADWATER_PG_DB:-headwater_test}"
action="${1:-start}"
data="$dir/data"
url="postgresql://postgres@127.0.0.1:$port/$db"

log() { echo "[postgres] $*" >&2; }

# --- the server binaries ---------------------------------------------------------
find_bindir() {
  local d
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return 0
  fi
  # Debian keeps them out of PATH, one directory per major version: take the newest.
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n -r); do
    if [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi

if ! bindir="$(find_bindir)"; then
  if [ "$action" != "start" ]; then log "PostgreSQL is not installed"; exit 1; fi
  if [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; then
    log "PostgreSQL not found, and not root and no sudo: apt-get install postgresql yourself"
    exit 1
  fi
  log "PostgreSQL not found: apt-get install -y postgresql"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q postgresql >&2
  bindir="$(find_bindir)" || { log "no pg_ctl/initdb after installing postgresql"; exit 1; }
fi

# --- who runs the server -----------------------------------------------------------
as_owner() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then
  if ! id postgres >/dev/null 2>&1; then
    log "creating the system user postgres"
    useradd --system --home-dir "$dir" --shell /bin/bash postgres
  fi
  if command -v runuser >/dev/null 2>&1; then
    as_owner() { runuser -u postgres -- "$@"; }
  else
    as_owner() { su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; }
  fi
fi

pg_ctl=("$bindir/pg_ctl" -D "$data")
running() { as_owner "${pg_ctl[@]}" status >/dev/null 2>&1; }

case "$action" in
  stop)
    if [ -f "$data/PG_VERSION" ] && running; then
      as_owner "${pg_ctl[@]}" -m fast -w stop >&2
    else
      log "not running"
    fi
    exit 0
    ;;
  status)
    if [ -f "$data/PG_VERSION" ] && running; then echo "$url"; exit 0; fi
    log "not running"
    exit 3
    ;;
  start) ;;
  *)
    log "usage: $0 [start|stop|status]"
    exit 2
    ;;
esac

# --- cluster -----------------------------------------------------------------------
mkdir -p "$dir"
if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
if [ ! -f "$data/PG_VERSION" ]; then
  log "initdb $data ($("$bindir/postgres" --version))"
  rm -rf "$data"
  as_owner "$bindir/initdb" -D "$data" --username=postgres --auth=trust \
    --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
fi

if running; then
  log "already running ($data)"
else
  log "starting on 127.0.0.1:$port"
  # Unix socket in $dir (/var/run/postgresql may not exist); fsync off: a test server.
  if ! as_owner "${pg_ctl[@]}" -w -t 60 -l "$dir/server.log" \
      -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c fsync=off" start >&2; then
    log "failed to start; tail of $dir/server.log:"
    tail -n 20 "$dir/server.log" >&2 || true
    exit 1
  fi
fi

# --- database ------------------------------------------------------------------------
psql=("$bindir/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1)
for _ in $(seq 1 50); do
  if "${psql[@]}" -tAc "SELECT 1" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
if [ "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != "1" ]; then
  log "creating database $db"
  "${psql[@]}" -c "CREATE DATABASE \"$db\"" >&2
fi
echo "$url"
