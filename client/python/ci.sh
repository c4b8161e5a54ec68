#!/usr/bin/env bash
# CI entry points of the Python client (see client-common brief):
#   ci.sh toolchain | install | build | test | bench
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

PY="${TICKETING_PYTHON:-python3}"
VENV="$here/.venv"
TEST_DEPS=(pytest hypothesis "mypy==2.4.1" "ruff==0.17.6" build "setuptools>=61" wheel)  # linters pinned: new rules never break CI

need_python() {
  command -v "$PY" >/dev/null 2>&1 || return 1
  "$PY" -c 'import sys, venv, ensurepip, ssl; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null
}

venv() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PY" -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c 'import pytest, hypothesis, mypy, build, setuptools, wheel' 2>/dev/null \
     || [[ ! -x "$VENV/bin/ruff" ]]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${TEST_DEPS[@]}"
  fi
}

case "${1:-}" in
toolchain)
  if ! need_python; then
    echo "apt-get install -y python3 python3-venv python3-pip" >&2
    exit 3
  fi
  ;;
install)
  if ! need_python; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q python3 python3-venv python3-pip
  fi
  venv
  ;;
build)
  need_python || { echo "python3 >= 3.10 missing: apt-get install -y python3 python3-venv" >&2; exit 3; }
  "$PY" -m compileall -q src testkit bench >/dev/null
  ;;
test)
  export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
  if [[ ! -x "$TICKETING_BIN" ]]; then
    echo "ci.sh test: server binary $TICKETING_BIN missing (run 'make build' or set TICKETING_BIN)" >&2
    exit 1
  fi
  venv
  V="$VENV/bin"
  echo "== ruff format --check"; "$V/ruff" format --check src tests testkit bench
  echo "== ruff check"; "$V/ruff" check src tests testkit bench
  echo "== mypy --strict"; MYPYPATH=testkit "$V/mypy" --strict src testkit/driver.py testkit/driver_aio.py bench/bench.py
  echo "== wheel build + install into a fresh venv"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  "$V/python" -m build --wheel --no-isolation --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 \
    || { cat "$tmp/build.log"; exit 1; }
  rm -rf "$here/build" "$here"/src/*.egg-info
  "$PY" -m venv "$tmp/venv"
  "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index "$tmp"/dist/*.whl
  (cd "$tmp" && "$tmp/venv/bin/python" -c '
import ticketing, pathlib
assert ticketing.Client and ticketing.AsyncClient
assert (pathlib.Path(ticketing.__file__).parent / "py.typed").exists()
print("installed", ticketing.__version__, "from", pathlib.Path(ticketing.__file__).parent)')
  echo "== pytest"
  PYTHONPATH="$here/src" "$V/python" -m pytest -q -p no:cacheprovider tests
  ;;
bench)
  : "${TICKETING_ADDR:?set TICKETING_ADDR to host:port of a running server}"
  PYTHONPATH="$here/src" "$PY" "$here/bench/bench.py"
  ;;
*)
  echo "usage: ci.sh toolchain|install|build|test|bench" >&2
  exit 2
  ;;
esac
