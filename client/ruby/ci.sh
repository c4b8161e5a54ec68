#!/usr/bin/env bash
# The Ruby client's entry points for the root Makefile and .ci/run:
#   ci.sh toolchain | install | build | test | bench
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

need() {
  local missing=()
  command -v ruby >/dev/null 2>&1 || missing+=(ruby)
  command -v gem >/dev/null 2>&1 || missing+=(ruby)
  ruby -e 'require "minitest"' >/dev/null 2>&1 || missing+=(ruby-minitest)
  command -v rake >/dev/null 2>&1 || missing+=(rake)
  ruby -e 'require "openssl"' >/dev/null 2>&1 || missing+=(ruby)
  printf '%s\n' "${missing[@]}" | sort -u | grep . || true
}

case "${1:-}" in
  toolchain)
    m=$(need)
    if [ -n "$m" ]; then
      echo "ruby client: missing $(echo $m): apt-get install -y $(echo $m)" >&2
      exit 3
    fi
    ;;
  install)
    m=$(need)
    command -v rubocop >/dev/null 2>&1 || m="$m rubocop"
    if [ -n "$(echo $m)" ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq $m >/dev/null
    fi
    ;;
  build)
    ruby -wc testkit/driver.rb >/dev/null
    ;;
  test)
    export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
    [ -x "$TICKETING_BIN" ] || { echo "ruby client: $TICKETING_BIN not found (make build at the repo root, or set TICKETING_BIN)" >&2; exit 1; }
    echo "== ruby: syntax and warnings"
    for f in lib/ticketing.rb lib/ticketing/*.rb testkit/*.rb test/*.rb; do ruby -wc "$f" >/dev/null; done
    if command -v rubocop >/dev/null 2>&1; then
      echo "== ruby: rubocop"
      rubocop --cache false --format simple lib test testkit ticketing.gemspec Rakefile
    else
      echo "== ruby: rubocop not installed (apt-get install -y rubocop); lint skipped"
    fi
    echo "== ruby: gem build + install into a temporary GEM_HOME"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    gem build -q ticketing.gemspec -o "$tmp/ticketing.gem" >/dev/null
    GEM_HOME="$tmp/gems" GEM_PATH="$tmp/gems" gem install -q --local --no-document "$tmp/ticketing.gem" >/dev/null
    (cd "$tmp" && GEM_HOME="$tmp/gems" GEM_PATH="$tmp/gems" ruby -e 'require "ticketing"; abort "bad version" unless Ticketing::VERSION =~ /\A0\./; puts "installed ticketing #{Ticketing::VERSION}"')
    echo "== ruby: minitest"
    rake test
    ;;
  bench)
    ruby testkit/bench.rb
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|bench" >&2
    exit 2
    ;;
esac
