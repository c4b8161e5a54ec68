#!/usr/bin/env bash
# The C# client's entry points for the root Makefile and .ci/run:
#   ci.sh toolchain | install | build | test | bench
# Built and tested here with Mono's compiler (mcs) and NUnit 2.6 from Debian; users build the
# SDK-style Ticketing.Client.csproj (netstandard2.0;net8.0) with the .NET SDK (not run here).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
NUNIT_FW=/usr/lib/cli/nunit.framework-2.6.3/nunit.framework.dll
PKGS="mono-mcs mono-devel nunit-console libnunit-cil-dev openssl"

missing() {
  local m=()
  command -v mcs >/dev/null 2>&1 || m+=(mono-mcs mono-devel)
  command -v mono >/dev/null 2>&1 || m+=(mono-devel)
  command -v nunit-console >/dev/null 2>&1 || m+=(nunit-console)
  [ -f "$NUNIT_FW" ] || m+=(libnunit-cil-dev)
  command -v openssl >/dev/null 2>&1 || m+=(openssl)
  printf '%s\n' "${m[@]}" | sort -u | tr '\n' ' '
}

build() {
  mkdir -p build
  # -warnaserror with XML docs: every public member documented, no warnings.
  mcs -target:library -langversion:7 -warnaserror -debug -out:build/Ticketing.Client.dll \
    -doc:build/Ticketing.Client.xml -r:System.dll -r:System.Core.dll src/*.cs
  mcs -langversion:7 -warnaserror -out:build/TicketingDriver.exe -r:build/Ticketing.Client.dll \
    -r:System.dll -r:System.Core.dll testkit/Driver.cs
  mcs -langversion:7 -warnaserror -out:build/TicketingBench.exe -r:build/Ticketing.Client.dll \
    -r:System.dll -r:System.Core.dll testkit/Bench.cs
}

case "${1:-}" in
  toolchain)
    m=$(missing)
    if [ -n "${m// }" ]; then
      echo "csharp client: missing tools: apt-get install -y $m" >&2
      exit 3
    fi
    ;;
  install)
    m=$(missing)
    if [ -n "${m// }" ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq $PKGS >/dev/null
    fi
    ;;
  build)
    build
    ;;
  test)
    export TICKETING_BIN="${TICKETING_BIN:-$repo/bin/ticketing}"
    [ -x "$TICKETING_BIN" ] || { echo "csharp client: $TICKETING_BIN not found (make build at the repo root, or set TICKETING_BIN)" >&2; exit 1; }
    echo "== csharp: build (mcs -warnaserror, XML docs on the public API)"
    build
    mcs -target:library -langversion:7 -warnaserror -nowarn:1591 -out:build/Ticketing.Client.Tests.dll \
      -r:build/Ticketing.Client.dll -r:System.dll -r:System.Core.dll -r:"$NUNIT_FW" tests/*.cs
    echo "== csharp: NUnit (wire golden vectors, fake server, real server, TLS)"
    out=$(mktemp)
    set +e
    (cd build && nunit-console -nologo -noshadow Ticketing.Client.Tests.dll -xml:"$out") 2>&1 | grep -v '^$'
    rc=${PIPESTATUS[0]}
    set -e
    total=$(grep -o 'total="[0-9]*"' "$out" | head -1 | grep -o '[0-9]*' || echo 0)
    failed=$(( $(grep -o 'failures="[0-9]*"' "$out" | head -1 | grep -o '[0-9]*' || echo 0) + $(grep -o ' errors="[0-9]*"' "$out" | head -1 | grep -o '[0-9]*' || echo 0) ))
    rm -f "$out"
    echo "csharp: $((total - failed)) passed, $failed failed"
    exit "$rc"
    ;;
  bench)
    [ -f build/TicketingBench.exe ] || build
    mono build/TicketingBench.exe
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|bench" >&2
    exit 2
    ;;
esac
