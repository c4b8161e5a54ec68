#!/usr/bin/env bash
# CI entry point of the JVM clients (Java + Kotlin): toolchain | install | build | test | bench.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
MVN=(mvn -B -q -ntp -Dstyle.color=never)

need() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
  command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  if command -v javac >/dev/null 2>&1; then
    local v
    v="$(javac -version 2>&1 | sed -E 's/^javac ([0-9]+).*/\1/')"
    if [[ "$v" =~ ^[0-9]+$ ]] && (( v < 17 )); then missing+=(openjdk-17-jdk-headless); fi
  fi
  printf '%s\n' "${missing[@]}" | sort -u | grep -v '^$' || true
}

tk_cp() {
  echo "$here/ticketing-testkit/target/ticketing-testkit-0.1.0.jar:$here/ticketing-testkit/target/lib/*"
}

case "${1:-}" in
  toolchain)
    m="$(need)"
    if [[ -n "$m" ]]; then
      echo "apt-get install -y $(echo $m)" >&2
      exit 3
    fi
    ;;
  install)
    m="$(need)"
    if [[ -n "$m" ]]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      # shellcheck disable=SC2086
      apt-get install -y -qq $m
    fi
    ;;
  build)
    "${MVN[@]}" -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true package
    ;;
  test)
    bin="${TICKETING_BIN:-$repo/bin/ticketing}"
    if [[ ! -x "$bin" ]]; then
      echo "ci.sh test: server binary $bin not found (build it with 'make build' or set TICKETING_BIN)" >&2
      exit 1
    fi
    export TICKETING_BIN="$bin"
    rm -rf ticketing-*/target/surefire-reports
    rc=0
    "${MVN[@]}" verify || rc=$?
    if (( rc == 0 )); then
      # Packaging: the Java module's jar, sources and javadoc jars, a named module.
      for f in ticketing-client/target/ticketing-client-0.1.0{,-sources,-javadoc}.jar ticketing-kotlin/target/ticketing-kotlin-0.1.0{,-sources}.jar; do
        [[ -s "$f" ]] || { echo "packaging: $f missing" >&2; rc=1; }
      done
      jar --describe-module --file ticketing-client/target/ticketing-client-0.1.0.jar | grep -q '^io.ticketing.client' \
        || { echo "packaging: ticketing-client is not a named module" >&2; rc=1; }
    fi
    # The surefire totals (Maven's own summary format), then the verdict.
    t=0 f=0 e=0 sk=0
    for x in ticketing-*/target/surefire-reports/TEST-*.xml; do
      [[ -f "$x" ]] || continue
      head=$(grep -m1 -o '<testsuite [^>]*>' "$x")
      get() { sed -nE "s/.* $1=\"([0-9]+)\".*/\1/p" <<<"$head"; }
      t=$((t + $(get tests))) f=$((f + $(get failures))) e=$((e + $(get errors))) sk=$((sk + $(get skipped)))
    done
    echo "Tests run: $t, Failures: $f, Errors: $e, Skipped: $sk"
    if (( rc == 0 )); then echo "BUILD SUCCESS"; else echo "BUILD FAILURE"; fi
    exit "$rc"
    ;;
  bench)
    addr="${TICKETING_ADDR:?set TICKETING_ADDR=host:port}"
    if [[ ! -f "$here/ticketing-testkit/target/ticketing-testkit-0.1.0.jar" ]]; then
      "$0" build
    fi
    java -cp "$(tk_cp)" io.ticketing.testkit.Bench "$addr" "${BENCH_SECONDS:-5}" "${TICKETING_CI_LANG:-java}"
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|bench" >&2
    exit 2
    ;;
esac
