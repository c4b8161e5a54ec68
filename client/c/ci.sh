#!/usr/bin/env bash
# CI entry points of the C and C++ clients (client/cpp/ci.sh delegates here):
#   ci.sh toolchain | install | build | test | package-check | bench
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

build() { # build dir, extra cmake args... (the project's own build: TK_DEV)
  local dir="$1"; shift
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_DEV=ON "$@" >/dev/null
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
  if command -v clang >/dev/null 2>&1; then
    echo "== libFuzzer: response decoder, ${FUZZ_SECONDS:-10} s"
    CC=clang CXX=clang++ build "$here/build-fuzz" -DTK_FUZZ=ON -DTK_TESTS=OFF
    mkdir -p "$tmp/corpus"
    # seeds: every response vector of protocol 1.0, and every 1.1 vector (§12): the
    # feature pong, REJECT TLS_REQUIRED, the S/X frames (set bodies) and the label
    for f in ../wire/testdata/golden/resp_*.hex ../wire/testdata/golden/v1_1/*.hex ../wire/testdata/golden/welcome_*.hex; do
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
package-check)
  # The README's install, outside the repository, as a consumer does it: a
  # release build with a C compiler only (no TK_DEV), installed into a prefix;
  # fresh C and C++ programs (the README's first examples) through
  # find_package and pkg-config, shared and static, against a real server
  # (issue 33 P3 and finding 5).
  . "$repo/scripts/package-check-lib.sh"
  tmp="$(mktemp -d)"; trap 'pc_stop_server; rm -rf "$tmp"' EXIT
  echo "== package-check: cmake -S client/c -B build -DCMAKE_BUILD_TYPE=Release (C compiler only) && cmake --install"
  cmake -S "$here" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=/nonexistent/c++ >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
  cmake --build "$tmp/build" -j"$JOBS" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
  cmake --install "$tmp/build" --prefix "$tmp/prefix" >/dev/null
  lib="$tmp/prefix/lib"
  [[ -d "$lib/pkgconfig" ]] || lib="$(dirname "$(find "$tmp/prefix" -name ticketing.pc)")/.."
  echo "== package-check: libticketing.so.0 (SONAME) exports exactly the TK_API functions of ticketing.h"
  soname=$(readelf -d "$lib/libticketing.so.0"); grep -q 'SONAME.*\[libticketing.so.0\]' <<<"$soname" || { echo "package-check: no SONAME libticketing.so.0" >&2; exit 1; }
  grep -o 'TK_API [^(]*(' "$tmp/prefix/include/ticketing.h" | grep -o 'tk_[a-z0-9_]*($' | tr -d '(' | sort -u >"$tmp/api.txt"
  nm -D --defined-only "$lib/libticketing.so.0" | awk '{print $3}' | sort -u >"$tmp/exported.txt"
  diff "$tmp/api.txt" "$tmp/exported.txt" || { echo "package-check: exported symbols differ from the public header (< header, > library)" >&2; exit 1; }
  proj="$tmp/app"; mkdir -p "$proj"
  pc_first_block "$here/README.md" cmake >"$proj/CMakeLists.txt"
  pc_start_server "$tmp"
  pc_first_block "$here/README.md" c | sed "s/127\.0\.0\.1:7470/$PC_ADDR/g" >"$proj/app.c"
  pc_first_block "$here/README.md" cpp | sed "s/127\.0\.0\.1:7470/$PC_ADDR/g" >"$proj/app.cpp"
  grep -q "$PC_ADDR" "$proj/app.c" && grep -q "$PC_ADDR" "$proj/app.cpp" || { echo "package-check: a first example names no 127.0.0.1:7470" >&2; exit 1; }
  run() { # name, program...: runs a consumer, which must print its fencing token
    local name=$1; shift
    local out; out=$("$@") || { echo "package-check: $name failed: $out" >&2; exit 1; }
    grep -q "fencing token" <<<"$out" || { echo "package-check: $name printed no fencing token: $out" >&2; exit 1; }
    echo "   $name: $out"
  }
  links_shared() { local d; d=$(LD_LIBRARY_PATH="$lib" ldd "$1"); grep -q "libticketing.so.0 => $lib" <<<"$d"; }
  for kind in shared static; do
    echo "== package-check: find_package(ticketing), target ticketing::$([[ $kind = shared ]] && echo ticketing || echo static)"
    src="$proj"
    if [[ $kind = static ]]; then
      src="$tmp/app-static-src"; mkdir -p "$src"; cp "$proj"/app.c "$proj"/app.cpp "$src/"
      sed 's/ticketing::ticketing/ticketing::static/g' "$proj/CMakeLists.txt" >"$src/CMakeLists.txt"
    fi
    cmake -S "$src" -B "$tmp/cm-$kind" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; exit 1; }
    cmake --build "$tmp/cm-$kind" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; exit 1; }
    if [[ $kind = shared ]]; then links_shared "$tmp/cm-$kind/app" || { echo "package-check: app does not load $lib/libticketing.so.0" >&2; ldd "$tmp/cm-$kind/app"; exit 1; }
    elif ldd "$tmp/cm-$kind/app" | grep libticketing >/dev/null; then echo "package-check: the static app loads libticketing.so" >&2; exit 1; fi
    run "cmake $kind C" "$tmp/cm-$kind/app"
    run "cmake $kind C++" "$tmp/cm-$kind/app_cpp"
  done
  export PKG_CONFIG_PATH="$lib/pkgconfig"
  echo "== package-check: pkg-config ticketing $(pkg-config --modversion ticketing), shared and static (cc only)"
  (cd "$proj" && cc -std=c99 -Wall -Werror app.c $(pkg-config --cflags --libs ticketing) -o app-pc)
  links_shared "$proj/app-pc" || { echo "package-check: app-pc does not load libticketing.so.0" >&2; exit 1; }
  run "pkg-config shared C" env LD_LIBRARY_PATH="$lib" "$proj/app-pc"
  (cd "$proj" && cc -static -std=c99 -Wall app.c $(pkg-config --cflags --libs --static ticketing) -o app-pc-static 2>"$tmp/static.log") || { cat "$tmp/static.log"; exit 1; }
  run "pkg-config static C" "$proj/app-pc-static"
  (cd "$proj" && c++ -std=c++17 -Wall -Werror app.cpp $(pkg-config --cflags --libs ticketing) -o app-pc-cpp)
  run "pkg-config shared C++" env LD_LIBRARY_PATH="$lib" "$proj/app-pc-cpp"
  pc_stop_server
  echo "package-check: ok"
  ;;
bench)
  : "${TICKETING_ADDR:?set TICKETING_ADDR to host:port of a running server}"
  [[ -x "$here/build/tk_bench" ]] || build "$here/build"
  "$here/build/tk_bench"
  ;;
*)
  echo "usage: ci.sh toolchain|install|build|test|package-check|bench" >&2
  exit 2
  ;;
esac
