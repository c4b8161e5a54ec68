#!/usr/bin/env bash
# CI entry point of the JVM clients (Java + Kotlin): toolchain | install | build | test | bench.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
MVN=(mvn -B -q -ntp)

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
    python3 - "$rc" <<'PY' || awk 'BEGIN{}' /dev/null
import glob, sys, xml.etree.ElementTree as ET
t = f = e = s = 0
for p in glob.glob("ticketing-*/target/surefire-reports/TEST-*.xml"):
    r = ET.parse(p).getroot()
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0)); e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
rc = int(sys.argv[1])
print(f"Tests run: {t}, Failures: {f}, Errors: {e}, Skipped: {s}")
print("BUILD SUCCESS" if rc == 0 else "BUILD FAILURE")
PY
    exit "$rc"
    ;;
  bench)
    addr="${TICKETING_ADDR:?set TICKETING_ADDR=host:port}"
    if [[ ! -f "$here/ticketing-testkit/target/ticketing-testkit-0.1.0.jar" ]]; then
      "$0" build
    fi
    java -cp "$(tk_cp)" io.ticketing.testkit.Bench "$addr" "${BENCH_SECONDS:-5}"
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|bench" >&2
    exit 2
    ;;
esac
