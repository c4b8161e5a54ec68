#!/usr/bin/env bash
# The Ruby client's entry points for the root Makefile and .ci/run:
#   ci.sh toolchain | install | build | test | package-check | bench
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
      apt-get -o DPkg::Lock::Timeout=600 update -qq
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq $m >/dev/null
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
      rubocop --cache false --format simple lib test testkit ticketing-client.gemspec Rakefile
    else
      echo "== ruby: rubocop not installed (apt-get install -y rubocop); lint skipped"
    fi
    echo "== ruby: minitest"
    rake test
    ;;
  package-check)
    # The README's install, outside the repository: gem build, gem install
    # into a fresh GEM_HOME, the README's first example against a real
    # server (issue 32 P3).
    . "$repo/scripts/package-check-lib.sh"
    tmp=$(mktemp -d); trap 'pc_stop_server; rm -rf "$tmp"' EXIT
    proj="$tmp/project"; mkdir -p "$proj"; cd "$proj"
    export GEM_HOME="$tmp/gems" GEM_PATH="$tmp/gems"
    gemfile="ticketing-client-$(ruby -e 'require_relative ARGV[0]; print Ticketing::VERSION' "$here/lib/ticketing/version.rb").gem"
    echo "== package-check: gem build -C $here ticketing-client.gemspec -o $gemfile"
    gem build -q -C "$here" ticketing-client.gemspec -o "$PWD/$gemfile" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
    if grep -qi "warning" "$tmp/build.log"; then cat "$tmp/build.log"; echo "package-check: gem build warned" >&2; exit 1; fi
    echo "== package-check: contents and metadata of $gemfile"
    ruby -rrubygems/package -e '
      spec = Gem::Package.new(ARGV[0]).spec
      bad = spec.files.reject { |f| f.start_with?("lib/") || %w[README.md CHANGELOG.md].include?(f) }
      abort "gem holds files outside lib/: #{bad}" unless bad.empty?
      abort "name #{spec.name}" unless spec.name == "ticketing-client"
      abort "license #{spec.licenses}" unless spec.licenses == ["Apache-2.0"]
      abort "no homepage" if spec.homepage.to_s.empty?
      %w[source_code_uri changelog_uri].each { |k| abort "no #{k}" if spec.metadata[k].to_s.empty? }
      abort "no required_ruby_version" if spec.required_ruby_version.none?
      puts "#{spec.files.size} files, metadata ok"' "$gemfile"
    echo "== package-check: gem install ./$gemfile (GEM_HOME=$GEM_HOME)"
    gem install -q --local --no-document "./$gemfile" >/dev/null
    pc_start_server "$tmp"
    pc_first_block "$here/README.md" ruby | sed "s/127\\.0\\.0\\.1:7470/$PC_ADDR/g" >example.rb
    grep -q "$PC_ADDR" example.rb || { echo "package-check: the README's first example names no 127.0.0.1:7470" >&2; exit 1; }
    echo "== package-check: the README's first example (ruby -w example.rb)"
    out=$(ruby -w example.rb 2>&1)
    echo "$out"
    grep -q "fencing token" <<<"$out" || { echo "package-check: the example printed no fencing token" >&2; exit 1; }
    ! grep -qi "warning" <<<"$out" || { echo "package-check: the example warned" >&2; exit 1; }
    pc_stop_server
    echo "package-check: ok"
    ;;
  bench)
    ruby testkit/bench.rb
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|package-check|bench" >&2
    exit 2
    ;;
esac
