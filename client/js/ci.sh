#!/usr/bin/env bash
# CI entry points of the JS/TS client (see the client-common brief):
#   ci.sh toolchain | install | build | test | package-check | bench
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

need_node() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'
}

deps() {
  if [[ ! -x node_modules/.bin/tsc || ! -d node_modules/fast-check || ! -x node_modules/.bin/prettier \
        || package-lock.json -nt node_modules/.package-lock.json ]]; then
    npm ci --no-audit --no-fund --loglevel=error
  fi
}

case "${1:-}" in
toolchain)
  if ! need_node; then
    echo "apt-get install -y nodejs   # Node.js >= 20 with npm: Debian 13, or the deb.nodesource.com node_20.x repository on Debian 12 (plus 'apt-get install -y npm' where npm is packaged separately)" >&2
    exit 3
  fi
  ;;
install)
  if ! need_node; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q nodejs
    # Debian packages npm separately; NodeSource's nodejs includes it (and conflicts with it).
    command -v npm >/dev/null 2>&1 || apt-get install -y -q npm
    need_node || { echo "node >= 20 required; this Debian's nodejs is older (use deb.nodesource.com node_20.x)" >&2; exit 3; }
  fi
  deps
  ;;
build)
  need_node || { echo "node >= 20 missing: apt-get install -y nodejs npm" >&2; exit 3; }
  deps
  node scripts/build.mjs
  ;;
test)
  export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
  if [[ ! -x "$TICKETING_BIN" ]]; then
    echo "ci.sh test: server binary $TICKETING_BIN missing (run 'make build' or set TICKETING_BIN)" >&2
    exit 1
  fi
  deps
  echo "== prettier --check"
  node_modules/.bin/prettier --check . >/dev/null || { node_modules/.bin/prettier --check .; exit 1; }
  echo "== tsc (strict): ESM, CJS, tests"
  node scripts/build.mjs
  # The package check (npm pack into a fresh project) is `ci.sh package-check`,
  # run once by `make test-packages`.
  echo "== node --test"
  node --test --test-concurrency=2 build/test/
  ;;
package-check)
  export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
  echo "== package-check: npm pack, install into a fresh project, the README's example (ESM, CJS, tsc --strict)"
  need_node || { echo "node >= 20 missing: apt-get install -y nodejs npm" >&2; exit 3; }
  deps
  bash scripts/package-check.sh
  ;;
bench)
  : "${TICKETING_ADDR:?set TICKETING_ADDR to host:port of a running server}"
  [[ -f dist/esm/index.js ]] || { deps; node scripts/build.mjs --no-test; }
  node bench/bench.mjs
  ;;
*)
  echo "usage: ci.sh toolchain|install|build|test|package-check|bench" >&2
  exit 2
  ;;
esac
