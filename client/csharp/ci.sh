#!/usr/bin/env bash
# The C# client's entry points for the root Makefile and .ci/run:
#   ci.sh toolchain | install | build | test | pack | package-check | bench
# Built and tested here with Mono's compiler (mcs) and NUnit 2.6 from Debian; users build the
# SDK-style Ticketing.Client.csproj (netstandard2.0;net8.0) with the .NET SDK (not run here).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
NUNIT_FW=/usr/lib/cli/nunit.framework-2.6.3/nunit.framework.dll
PKGS="mono-mcs mono-devel nunit-console libnunit-cil-dev openssl nuget unzip"

missing() {
  local m=()
  command -v mcs >/dev/null 2>&1 || m+=(mono-mcs mono-devel)
  command -v mono >/dev/null 2>&1 || m+=(mono-devel)
  command -v nunit-console >/dev/null 2>&1 || m+=(nunit-console)
  [ -f "$NUNIT_FW" ] || m+=(libnunit-cil-dev)
  command -v openssl >/dev/null 2>&1 || m+=(openssl)
  command -v nuget >/dev/null 2>&1 || m+=(nuget)
  command -v unzip >/dev/null 2>&1 || m+=(unzip)
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
  pack)
    build
    nuget pack Ticketing.Client.nuspec -OutputDirectory build -NoPackageAnalysis -NonInteractive >/dev/null
    echo "build/Ticketing.Client.0.1.0.nupkg"
    ;;
  package-check)
    # As the README installs it (issue 34 P1-P3): the .nupkg packed with Debian's nuget, installed
    # with `nuget install` from a local folder into a fresh program's directory outside the
    # repository; every csharp block of the README compiled with mcs against it (the first, a
    # program, also run against a real `ticketing serve` on a port from the OS).
    . "$repo/scripts/package-check-lib.sh"
    tmp="$(mktemp -d)"
    trap 'pc_stop_server; rm -rf "$tmp"' EXIT
    echo "== package-check: ci.sh pack"
    build
    mkdir -p "$tmp/feed" "$tmp/app"
    nuget pack Ticketing.Client.nuspec -OutputDirectory "$tmp/feed" -NoPackageAnalysis -NonInteractive >/dev/null
    pkg="$tmp/feed/Ticketing.Client.0.1.0.nupkg"
    [ -s "$pkg" ] || { echo "package-check: $pkg not packed" >&2; exit 1; }
    list=$(unzip -Z1 "$pkg")
    spec=$(unzip -p "$pkg" Ticketing.Client.nuspec)
    for tag in '<id>Ticketing.Client</id>' '<licenseUrl>' '<projectUrl>' '<description>' '<authors>'; do
      grep -q "$tag" <<<"$spec" || { echo "package-check: the package's nuspec lacks $tag" >&2; exit 1; }
    done
    for f in lib/net45/Ticketing.Client.dll lib/net45/Ticketing.Client.xml Ticketing.Client.nuspec; do
      grep -qx "$f" <<<"$list" || { echo "package-check: $f missing from the package" >&2; exit 1; }
    done
    if grep -Eiq 'test|driver|bench' <<<"$list"; then echo "package-check: tests or testkit in the package: $list" >&2; exit 1; fi
    cd "$tmp/app"
    echo "== package-check: nuget install Ticketing.Client -Version 0.1.0 -Source <folder> -OutputDirectory packages"
    nuget install Ticketing.Client -Version 0.1.0 -Source "$tmp/feed" -OutputDirectory packages -NonInteractive >/dev/null
    lib=packages/Ticketing.Client.0.1.0/lib/net45
    [ -f "$lib/Ticketing.Client.dll" ] || { echo "package-check: nuget install left no $lib/Ticketing.Client.dll" >&2; exit 1; }
    pc_start_server "$tmp"
    # Every csharp block of the README: block 1 is the first example (a program).
    awk '/^```csharp[[:space:]]*$/{n++; f=sprintf("example%d.cs", n); next} /^```/{f=""} f{print > f}' "$here/README.md"
    [ -f example1.cs ] || { echo "package-check: the README has no csharp block" >&2; exit 1; }
    sed -i "s/127\.0\.0\.1:7470/$PC_ADDR/g" example1.cs
    grep -q "$PC_ADDR" example1.cs || { echo "package-check: the README's first example names no 127.0.0.1:7470" >&2; exit 1; }
    n=0
    for f in example*.cs; do
      n=$((n + 1))
      if [ "$f" = example1.cs ]; then target=exe; else target=library; fi
      echo "== package-check: mcs -langversion:7 -target:$target -r:$lib/Ticketing.Client.dll $f"
      mcs -langversion:7 -warnaserror -target:$target -out:"${f%.cs}.$([ $target = exe ] && echo exe || echo dll)" \
        -r:"$lib/Ticketing.Client.dll" -r:System.dll -r:System.Core.dll "$f"
    done
    cp "$lib/Ticketing.Client.dll" .
    echo "== package-check: mono example1.exe"
    out=$(env -u TICKETING_TOKEN mono example1.exe)
    echo "$out"
    grep -q "fencing token [0-9]" <<<"$out" || { echo "package-check: the first example printed no fencing token" >&2; exit 1; }
    echo "package-check: $n passed, 0 failed"
    ;;
  bench)
    [ -f build/TicketingBench.exe ] || build
    mono build/TicketingBench.exe
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|pack|package-check|bench" >&2
    exit 2
    ;;
esac
