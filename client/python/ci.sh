#!/usr/bin/env bash
# CI entry points of the Python client (see client-common brief):
#   ci.sh toolchain | install | build | test | package-check | bench
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

PY="${TICKETING_PYTHON:-python3}"
VENV="$here/.venv"
TEST_DEPS=(pytest hypothesis "mypy==2.4.1" "ruff==0.17.6" build "setuptools>=77" wheel)  # linters pinned: new rules never break CI

need_python() {
  command -v "$PY" >/dev/null 2>&1 || return 1
  "$PY" -c 'import sys, venv, ensurepip, ssl; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null
}

venv() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PY" -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c 'import pytest, hypothesis, mypy, build, setuptools, wheel, sys
sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null \
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
  echo "== pytest"
  PYTHONPATH="$here/src" "$V/python" -m pytest -q -p no:cacheprovider tests
  ;;
package-check)
  # The README's install, outside the repository: a fresh venv with the
  # build frontend, `python -m build`, the wheel into a fresh project's
  # venv, the README's first example against a real server (issue 32 P3).
  need_python || { echo "python3 >= 3.10 missing: apt-get install -y python3 python3-venv" >&2; exit 3; }
  . "$repo/scripts/package-check-lib.sh"
  tmp="$(mktemp -d)"; trap 'pc_stop_server; rm -rf "$tmp"' EXIT
  proj="$tmp/project"; mkdir -p "$proj"; cd "$proj"
  pipq=(-q --disable-pip-version-check)
  echo "== package-check: python -m venv .venv; pip install build"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install "${pipq[@]}" build
  echo "== package-check: python -m build --outdir dist $here"
  .venv/bin/python -m build --outdir dist "$here" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
  rm -rf "$here/build" "$here"/src/*.egg-info
  whl=(dist/ticketing_client-*-py3-none-any.whl); sdist=(dist/ticketing_client-*.tar.gz)
  [[ -f "${whl[0]}" && -f "${sdist[0]}" ]] || { ls -l dist; echo "package-check: wheel or sdist missing" >&2; exit 1; }
  echo "== package-check: contents and metadata of ${whl[0]##*/} and ${sdist[0]##*/}"
  .venv/bin/python - "${whl[0]}" "${sdist[0]}" <<'PY'
import sys, tarfile, zipfile, email.parser
whl, sdist = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(whl).namelist()
bad = [n for n in names if not (n.startswith("ticketing/") or n.startswith("ticketing_client-"))]
bad += [n for n in names if n.startswith("ticketing/") and not (n.endswith(".py") or n.endswith("py.typed"))]
assert not bad, f"wheel holds files outside the package: {bad}"
assert "ticketing/py.typed" in names, "py.typed missing"
meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
meta = email.parser.Parser().parsestr(zipfile.ZipFile(whl).read(meta_name).decode())
want = {"Name": "ticketing-client", "License-Expression": "Apache-2.0", "Requires-Python": ">=3.10"}
for k, v in want.items():
    assert meta.get(k) == v, f"METADATA {k}: {meta.get(k)!r}, want {v!r}"
assert meta.get("Summary"), "no Summary"
urls = meta.get_all("Project-URL") or []
assert any(u.startswith("Repository, ") for u in urls) and any(u.startswith("Homepage, ") for u in urls), urls
assert not meta.get("License"), "deprecated License field (use the PEP 639 expression)"
members = tarfile.open(sdist).getnames()
bad = [m for m in members if any(p in m.split("/") for p in ("tests", "testkit", "bench", "ci.sh", "go.mod"))]
assert not bad, f"sdist holds repository internals: {bad}"
print(f"wheel: {len(names)} files, sdist: {len(members)} members, metadata ok")
PY
  echo "== package-check: a fresh project: python -m venv .venv; pip install ${whl[0]}"
  rm -rf .venv; "$PY" -m venv .venv
  .venv/bin/python -m pip install "${pipq[@]}" "${whl[0]}"
  pc_start_server "$tmp"
  pc_first_block "$here/README.md" python | sed "s/127\.0\.0\.1:7470/$PC_ADDR/g" >example.py
  grep -q "$PC_ADDR" example.py || { echo "package-check: the README's first example names no 127.0.0.1:7470" >&2; exit 1; }
  echo "== package-check: the README's first example (python -W error example.py)"
  out=$(.venv/bin/python -W error example.py)
  echo "$out"
  grep -q "fencing token" <<<"$out" || { echo "package-check: the example printed no fencing token" >&2; exit 1; }
  pc_stop_server
  echo "package-check: ok"
  ;;
bench)
  : "${TICKETING_ADDR:?set TICKETING_ADDR to host:port of a running server}"
  PYTHONPATH="$here/src" "$PY" "$here/bench/bench.py"
  ;;
*)
  echo "usage: ci.sh toolchain|install|build|test|package-check|bench" >&2
  exit 2
  ;;
esac
