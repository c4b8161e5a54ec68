#!/usr/bin/env bash
# The Rust client's entry points for the root Makefile and .ci/run:
#   ci.sh toolchain | install | build | test | package-check | bench
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
export CARGO_TARGET_DIR="$here/target"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_TERM_COLOR=never

# Prefer the rustup toolchain when it is installed but not on PATH.
for d in "${HOME:-/root}/.cargo/bin" /root/.cargo/bin; do
  if ! command -v cargo >/dev/null 2>&1 && [ -x "$d/cargo" ]; then
    export PATH="$d:$PATH"
  fi
done

need() {
  local missing=()
  command -v cargo >/dev/null 2>&1 || missing+=(cargo)
  command -v rustc >/dev/null 2>&1 || missing+=(rustc)
  cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
  cargo clippy --version >/dev/null 2>&1 || missing+=(rust-clippy)
  command -v cc >/dev/null 2>&1 || missing+=(gcc)   # ring builds a little C and assembly
  printf '%s\n' "${missing[@]}" | sort -u | grep . || true
}

rust_new_enough() {
  # rust-version in Cargo.toml: 1.85 (async closures).
  local v; v=$(rustc --version 2>/dev/null | awk '{print $2}')
  [ -n "$v" ] && [ "$(printf '%s\n1.85.0\n' "$v" | sort -V | head -1)" = "1.85.0" ]
}

case "${1:-}" in
  toolchain)
    m=$(need)
    if [ -n "$m" ]; then
      echo "rust client: missing $(echo $m): apt-get install -y $(echo $m)" >&2
      exit 3
    fi
    if ! rust_new_enough; then
      echo "rust client: rustc $(rustc --version) is older than 1.85: apt-get install -y -t trixie cargo rustc (or rustup update stable)" >&2
      exit 3
    fi
    ;;
  install)
    m=$(need)
    if [ -n "$(echo $m)" ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq $m >/dev/null
    fi
    if ! rust_new_enough; then
      # Debian's rustc may be older than rust-version; `ci.sh toolchain` then
      # reports the client as skipped instead of failing the whole CI run.
      echo "rust client: rustc $(rustc --version 2>/dev/null || echo missing) is older than 1.85 (install a newer toolchain)" >&2
      exit 0
    fi
    cargo fetch --locked >/dev/null
    ;;
  build)
    cargo build --locked --example driver
    ;;
  test)
    export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
    [ -x "$TICKETING_BIN" ] || { echo "rust client: $TICKETING_BIN not found (make build at the repo root, or set TICKETING_BIN)" >&2; exit 1; }
    echo "== rust: cargo fmt --check"
    cargo fmt --check
    echo "== rust: cargo clippy --all-targets -- -D warnings"
    cargo clippy --locked --all-targets --features unstable-wire -q -- -D warnings
    cargo clippy --locked --lib -q -- -D warnings
    echo "== rust: cargo clippy --features log"
    cargo clippy --locked --lib --features log -q -- -D warnings
    echo "== rust: cargo clippy --no-default-features (no TLS)"
    cargo clippy --locked --lib --no-default-features -q -- -D warnings
    echo "== rust: cargo package"
    cargo package --locked --allow-dirty --no-verify -q
    cargo package --locked --allow-dirty --list >/dev/null
    echo "== rust: cargo test (unit, fake server, golden vectors, proptest, real server, doc tests)"
    cargo test --locked --features unstable-wire -- --test-threads=2
    ;;
  package-check)
    # The README's install outside the repository (issue 33 P2/P3): `cargo
    # package` builds the .crate users get (verified: it builds on its own),
    # a fresh `cargo new` project depends on the unpacked crate by path, and
    # the README's first example runs against a real server.
    . "$repo/scripts/package-check-lib.sh"
    tmp="$(mktemp -d)"; trap 'pc_stop_server; rm -rf "$tmp"' EXIT
    echo "== package-check: cargo package"
    cargo package --locked --allow-dirty -q
    crate="$CARGO_TARGET_DIR/package/ticketing-client-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1).crate"
    [ -f "$crate" ] || { echo "package-check: $crate missing" >&2; exit 1; }
    tar -xzf "$crate" -C "$tmp"
    pkg="$(echo "$tmp"/ticketing-client-*)"
    echo "== package-check: the crate's files"
    bad=$(tar -tzf "$crate" | sed 's|^[^/]*/||' | grep -vE '^(src/.*\.rs|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|README\.md|CHANGELOG\.md|\.cargo_vcs_info\.json)$' || true)
    [ -z "$bad" ] || { echo "package-check: the crate holds repository internals: $bad" >&2; exit 1; }
    for k in 'name = "ticketing-client"' 'license = "Apache-2.0"' 'repository = ' 'homepage = ' 'description = ' 'rust-version = ' 'name = "ticketing"'; do
      grep -q "^$k" "$pkg/Cargo.toml" || { echo "package-check: Cargo.toml lacks $k" >&2; exit 1; }
    done
    echo "== package-check: cargo new app; cargo add ticketing-client --path <crate>; cargo add tokio --features rt-multi-thread,macros"
    (cd "$tmp" && cargo new -q --vcs none app)
    app="$tmp/app"
    (cd "$app" && cargo add -q ticketing-client --path "$pkg" && cargo add -q tokio --features rt-multi-thread,macros)
    pc_start_server "$tmp"
    awk '!inb && /^```rust/ { inb = 1; next } inb && /^```/ { exit } inb { print }' README.md | sed "s/127\.0\.0\.1:7470/$PC_ADDR/g" >"$app/src/main.rs"
    grep -q "$PC_ADDR" "$app/src/main.rs" || { echo "package-check: the README's first example names no 127.0.0.1:7470" >&2; exit 1; }
    echo "== package-check: cargo run (the README's first example)"
    # A target dir kept between runs (dependencies compile once); the app itself is fresh.
    out=$(cd "$app" && CARGO_TARGET_DIR="$here/target/package-check" cargo run -q 2>"$tmp/run.log") || { cat "$tmp/run.log"; exit 1; }
    echo "   $out"
    grep -q "fencing token" <<<"$out" || { echo "package-check: the example printed no fencing token" >&2; cat "$tmp/run.log"; exit 1; }
    pc_stop_server
    echo "package-check: ok"
    ;;
  bench)
    cargo build --locked --release --example bench -q
    "$CARGO_TARGET_DIR/release/examples/bench"
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|package-check|bench" >&2
    exit 2
    ;;
esac
