#!/usr/bin/env bash
# CI entry points of the C and C++ clients (client/cpp/ci.sh delegates here):
#   ci.sh toolchain | install | build | test | bench
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
JOBS="${JOBS:-2}"
APT_PKGS=(cmake g++ libssl-dev libgtest-dev googletest pkg-config clang)

missing() {
  local m=0
  for t in cmake g++ gcc pkg-config; do command -v "$t" >/dev/null 2>&1 || m=1; done
  [[ -f /usr/include/openssl/ssl.h ]] || m=1
  [[ -f /usr/include/gtest/gtest.h ]] || m=1
  [[ -d /usr/src/googletest || -f /usr/lib/x86_64-linux-gnu/libgtest.a || -n "$(ls /usr/lib/*/libgtest.a 2>/dev/null)" ]] || m=1
  return $m
}

build() { # build dir, extra cmake args...
  local dir="$1"; shift
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS" -- --no-print-directory >/dev/null
}

case "${1:-}" in
toolchain)
  if ! missing; then
    echo "apt-get update && apt-get install -y ${APT_PKGS[*]}" >&2
    exit 3
  fi
  ;;
install)
  if ! missing || ! command -v clang >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q "${APT_PKGS[@]}"
  fi
  ;;
build)
  build "$here/build"
  ;;
test)
  export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
  if [[ ! -x "$TICKETING_BIN" ]]; then
    echo "ci.sh test: server binary $TICKETING_BIN missing (run 'make build' or set TICKETING_BIN)" >&2
    exit 1
  fi
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  if command -v clang-format >/dev/null 2>&1 && [[ -f .clang-format ]]; then
    echo "== clang-format --dry-run"
    clang-format --dry-run --Werror include/*.h include/*.hpp src/*.c src/*.h
  fi
  echo "== build (-Wall -Wextra -Werror)"
  build "$here/build"
  echo "== install into a temp prefix + consumers (CMake package, pkg-config)"
  cmake --install "$here/build" --prefix "$tmp/prefix" >/dev/null
  cmake -S examples/consumer -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
  cmake --build "$tmp/consumer" >/dev/null
  "$tmp/consumer/consumer_c" >/dev/null
  PKG_CONFIG_PATH="$(dirname "$(find "$tmp/prefix" -name ticketing.pc)")" 
  export PKG_CONFIG_PATH
  gcc -std=c99 -Wall -Werror examples/consumer/main.c -o "$tmp/pc_consumer" $(pkg-config --cflags --libs --static ticketing)
  "$tmp/pc_consumer" >/dev/null
  echo "installed ticketing $(pkg-config --modversion ticketing) into $tmp/prefix: OK"
  if command -v clang >/dev/null 2>&1; then
    echo "== libFuzzer: response decoder, ${FUZZ_SECONDS:-10} s"
    CC=clang CXX=clang++ build "$here/build-fuzz" -DTK_FUZZ=ON -DTK_TESTS=OFF
    mkdir -p "$tmp/corpus"
    for f in ../wire/testdata/golden/resp_*.hex; do
      hex="$(sed 's/#.*//' "$f" | tr -d ' \n\t')"
      printf "$(sed 's/../\\x&/g' <<<"$hex")" >"$tmp/corpus/$(basename "$f" .hex)"
    done
    "$here/build-fuzz/fuzz_decode" -max_total_time="${FUZZ_SECONDS:-10}" -max_len=4096 "$tmp/corpus" 2>&1 | tail -3
  else
    echo "== libFuzzer skipped (no clang)"
  fi
  echo "== AddressSanitizer + UBSan tests"
  build "$here/build-asan" -DTK_SANITIZE=ON
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$here/build-asan" -j"$JOBS" --output-on-failure >"$tmp/asan.log" 2>&1; then
    cat "$tmp/asan.log"; exit 1
  fi
  tail -n 3 "$tmp/asan.log"
  echo "== ThreadSanitizer tests"
  build "$here/build-tsan" -DTK_TSAN=ON
  if ! "$here/build-tsan/tk_tests" --gtest_list_tests >"$tmp/tsan.log" 2>&1; then
    echo "ThreadSanitizer cannot start on this kernel (e.g. vm.mmap_rnd_bits too high): skipped"; tail -n 2 "$tmp/tsan.log"
  elif ! TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$here/build-tsan" -j"$JOBS" --output-on-failure >"$tmp/tsan.log" 2>&1; then
    cat "$tmp/tsan.log"; exit 1
  fi
  tail -n 3 "$tmp/tsan.log"
  echo "== tests (ctest)"
  ctest --test-dir "$here/build" -j"$JOBS" --output-on-failure
  ;;
bench)
  : "${TICKETING_ADDR:?set TICKETING_ADDR to host:port of a running server}"
  [[ -x "$here/build/tk_bench" ]] || build "$here/build"
  "$here/build/tk_bench"
  ;;
*)
  echo "usage: ci.sh toolchain|install|build|test|bench" >&2
  exit 2
  ;;
esac
