# shellcheck shell=bash
# Jars fetched once with Maven into a cache folder (sourced by kafka.sh and flink.sh,
# each of which defines log first). A folder with .complete is never fetched again.

# fetch <dir> <artifacts as group:artifact:version ...> [-- extra mvn arguments]
fetch() {
  local target="$1" deps="" gav g a v
  shift
  [ -f "$target/.complete" ] && return 0
  local extra=()
  while [ "$#" -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
    IFS=: read -r g a v <<<"$1"
    deps="$deps<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
    shift
  done
  command -v mvn >/dev/null 2>&1 || { log "mvn not found (apt-get install maven)"; exit 1; }
  local work
  work="$(mktemp -d)"
  cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>headwater</groupId><artifactId>jars</artifactId><version>0</version>
  <dependencies>$deps</dependencies>
</project>
EOF
  log "fetching into $target (Maven Central, once)"
  rm -rf "$target.partial"
  if ! mvn -q -B -Dstyle.color=never -f "$work/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$target.partial" "${extra[@]}" >&2; then
    rm -rf "$work" "$target.partial"
    log "mvn failed"
    exit 1
  fi
  rm -rf "$work" "$target"
  mv "$target.partial" "$target"
  touch "$target/.complete"
}
