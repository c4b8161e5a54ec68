#!/usr/bin/env bash
# CI entry point of the JVM clients (Java + Kotlin): toolchain | install | build | test | package-check | bench.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
MVN=(mvn -B -q -ntp -Dstyle.color=never)

need() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
  command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  if command -v javac >/dev/null 2>&1; then
    local v
    v="$(javac -version 2>&1 | sed -E 's/^javac ([0-9]+).*/\1/')"
    if [[ "$v" =~ ^[0-9]+$ ]] && (( v < 17 )); then missing+=(openjdk-17-jdk-headless); fi
  fi
  printf '%s\n' "${missing[@]}" | sort -u | grep -v '^$' || true
}

tk_cp() {
  echo "$here/ticketing-testkit/target/ticketing-testkit-0.1.0.jar:$here/ticketing-testkit/target/lib/*"
}

case "${1:-}" in
  toolchain)
    m="$(need)"
    if [[ -n "$m" ]]; then
      echo "apt-get install -y $(echo $m)" >&2
      exit 3
    fi
    ;;
  install)
    m="$(need)"
    if [[ -n "$m" ]]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      # shellcheck disable=SC2086
      apt-get install -y -qq $m
    fi
    ;;
  build)
    "${MVN[@]}" -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true package
    ;;
  test)
    bin="${TICKETING_BIN:-$repo/bin/ticketing}"
    if [[ ! -x "$bin" ]]; then
      echo "ci.sh test: server binary $bin not found (build it with 'make build' or set TICKETING_BIN)" >&2
      exit 1
    fi
    export TICKETING_BIN="$bin"
    rm -rf ticketing-*/target/surefire-reports
    rc=0
    "${MVN[@]}" verify || rc=$?
    if (( rc == 0 )); then
      # Packaging: the Java module's jar, sources and javadoc jars, a named module.
      for f in ticketing-client/target/ticketing-client-0.1.0{,-sources,-javadoc}.jar ticketing-kotlin/target/ticketing-kotlin-0.1.0{,-sources,-javadoc}.jar; do
        [[ -s "$f" ]] || { echo "packaging: $f missing" >&2; rc=1; }
      done
      jar --describe-module --file ticketing-client/target/ticketing-client-0.1.0.jar | grep -q '^io.ticketing.client' \
        || { echo "packaging: ticketing-client is not a named module" >&2; rc=1; }
    fi
    # The surefire totals (Maven's own summary format), then the verdict.
    t=0 f=0 e=0 sk=0
    for x in ticketing-*/target/surefire-reports/TEST-*.xml; do
      [[ -f "$x" ]] || continue
      head=$(grep -m1 -o '<testsuite [^>]*>' "$x")
      get() { sed -nE "s/.* $1=\"([0-9]+)\".*/\1/p" <<<"$head"; }
      t=$((t + $(get tests))) f=$((f + $(get failures))) e=$((e + $(get errors))) sk=$((sk + $(get skipped)))
    done
    echo "Tests run: $t, Failures: $f, Errors: $e, Skipped: $sk"
    if (( rc == 0 )); then echo "BUILD SUCCESS"; else echo "BUILD FAILURE"; fi
    exit "$rc"
    ;;
  package-check)
    # As a user installs it (issue 34 P1-P3): `mvn install` into a private repository (under
    # mktemp -d; third-party artifacts come from ~/.m2 as a file:// mirror, else Central), the
    # installed POMs and jars checked, then fresh Java and Kotlin Maven projects outside the
    # repository depend on the coordinates and run the README's Java and Kotlin examples against a
    # real `ticketing serve` on a port from the OS.
    . "$repo/scripts/package-check-lib.sh"
    tmp="$(mktemp -d)"
    trap 'pc_stop_server; rm -rf "$tmp"' EXIT
    mkdir -p "$HOME/.m2/repository"
    cat >"$tmp/settings.xml" <<XML
<settings>
  <localRepository>$tmp/m2</localRepository>
  <profiles><profile><id>host-cache</id>
    <repositories><repository><id>host-cache</id><url>file://$HOME/.m2/repository</url></repository></repositories>
    <pluginRepositories><pluginRepository><id>host-cache</id><url>file://$HOME/.m2/repository</url></pluginRepository></pluginRepositories>
  </profile></profiles>
  <activeProfiles><activeProfile>host-cache</activeProfile></activeProfiles>
</settings>
XML
    PM=(mvn -B -q -ntp -Dstyle.color=never -s "$tmp/settings.xml")
    echo "== package-check: mvn install -DskipTests (private repository)"
    "${PM[@]}" -f "$here/pom.xml" install -DskipTests
    art="$tmp/m2/io/ticketing"
    for f in ticketing-client/0.1.0/ticketing-client-0.1.0{,-sources,-javadoc}.jar ticketing-kotlin/0.1.0/ticketing-kotlin-0.1.0{,-sources,-javadoc}.jar; do
      [[ -s "$art/$f" ]] || { echo "package-check: $f not installed" >&2; exit 1; }
    done
    [[ ! -e "$art/ticketing-testkit" ]] || { echo "package-check: the testkit was installed" >&2; exit 1; }
    for p in ticketing-parent/0.1.0/ticketing-parent-0.1.0.pom; do
      for tag in '<licenses>' '<name>Apache-2.0</name>' '<scm' '<developers>' '<url>https://github.com/ticketing/ticketing' '<description>'; do
        grep -q "$tag" "$art/$p" || { echo "package-check: $p lacks $tag" >&2; exit 1; }
      done
    done
    (cd "$tmp" && jar xf "$art/ticketing-kotlin/0.1.0/ticketing-kotlin-0.1.0.jar" META-INF/MANIFEST.MF)
    grep -q '^Automatic-Module-Name: io.ticketing.kotlin' "$tmp/META-INF/MANIFEST.MF" \
      || { echo "package-check: ticketing-kotlin has no Automatic-Module-Name" >&2; exit 1; }
    jar tf "$art/ticketing-kotlin/0.1.0/ticketing-kotlin-0.1.0-javadoc.jar" | grep -q 'index.html' \
      || { echo "package-check: ticketing-kotlin's javadoc jar holds no KDoc" >&2; exit 1; }
    if jar tf "$art/ticketing-client/0.1.0/ticketing-client-0.1.0.jar" | grep -Eq 'Test|testkit|FakeServer'; then
      echo "package-check: test classes in ticketing-client's jar" >&2; exit 1
    fi
    pc_start_server "$tmp"
    # The Java project: the README's dependency block, its first java example as Example.java.
    jp="$tmp/java-app"; mkdir -p "$jp/src/main/java"
    dep=$(awk '/^```xml/{b=1;next} b&&/^```/{exit} b' "$here/README.md")
    cat >"$jp/pom.xml" <<XML
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId><artifactId>java-app</artifactId><version>1</version>
  <properties><maven.compiler.release>17</maven.compiler.release><project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
  <dependencies>
$dep
  </dependencies>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId><artifactId>maven-compiler-plugin</artifactId><version>3.13.0</version>
  </plugin></plugins></build>
</project>
XML
    pc_first_block "$here/README.md" java | sed "s/127\.0\.0\.1:7470/$PC_ADDR/g" >"$jp/src/main/java/Example.java"
    grep -q "$PC_ADDR" "$jp/src/main/java/Example.java" || { echo "package-check: the README's Java example names no 127.0.0.1:7470" >&2; exit 1; }
    echo "== package-check: a fresh Java project depending on io.ticketing:ticketing-client:0.1.0"
    (cd "$jp" && "${PM[@]}" compile dependency:build-classpath -Dmdep.outputFile=cp.txt -Dmdep.includeScope=runtime)
    if tr ':' '\n' <"$jp/cp.txt" | grep -v '/io/ticketing/ticketing-client/' | grep -q .; then
      echo "package-check: a Java-only user pulls more than ticketing-client: $(cat "$jp/cp.txt")" >&2; exit 1
    fi
    out=$(cd "$jp" && env -u TICKETING_TOKEN java -cp "target/classes:$(cat cp.txt)" Example)
    echo "$out"
    grep -q "fencing token [0-9]" <<<"$out" || { echo "package-check: the Java example printed no fencing token" >&2; exit 1; }
    # The Kotlin project: ticketing-kotlin and the kotlin-maven-plugin, the README's kotlin example.
    kp="$tmp/kotlin-app"; mkdir -p "$kp/src/main/kotlin"
    cat >"$kp/pom.xml" <<XML
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId><artifactId>kotlin-app</artifactId><version>1</version>
  <properties><project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
  <dependencies>
    <dependency><groupId>io.ticketing</groupId><artifactId>ticketing-kotlin</artifactId><version>0.1.0</version></dependency>
  </dependencies>
  <build>
    <sourceDirectory>src/main/kotlin</sourceDirectory>
    <plugins><plugin>
      <groupId>org.jetbrains.kotlin</groupId><artifactId>kotlin-maven-plugin</artifactId><version>1.9.24</version>
      <configuration><jvmTarget>17</jvmTarget></configuration>
      <executions><execution><id>compile</id><goals><goal>compile</goal></goals></execution></executions>
    </plugin></plugins>
  </build>
</project>
XML
    pc_first_block "$here/README.md" kotlin | sed "s/127\.0\.0\.1:7470/$PC_ADDR/g" >"$kp/src/main/kotlin/Example.kt"
    grep -q "$PC_ADDR" "$kp/src/main/kotlin/Example.kt" || { echo "package-check: the README's Kotlin example names no 127.0.0.1:7470" >&2; exit 1; }
    echo "== package-check: a fresh Kotlin project depending on io.ticketing:ticketing-kotlin:0.1.0"
    (cd "$kp" && "${PM[@]}" compile dependency:build-classpath -Dmdep.outputFile=cp.txt -Dmdep.includeScope=runtime)
    out=$(cd "$kp" && env -u TICKETING_TOKEN java -cp "target/classes:$(cat cp.txt)" ExampleKt)
    echo "$out"
    grep -q "fencing token [0-9]" <<<"$out" || { echo "package-check: the Kotlin example printed no fencing token" >&2; exit 1; }
    echo "package-check: 2 passed, 0 failed"
    ;;
  bench)
    addr="${TICKETING_ADDR:?set TICKETING_ADDR=host:port}"
    if [[ ! -f "$here/ticketing-testkit/target/ticketing-testkit-0.1.0.jar" ]]; then
      "$0" build
    fi
    # BENCH_API=virtual: only the virtual-thread rows (scripts/bench-report.sh's java-virtual row).
    if [[ "${BENCH_API:-}" != virtual ]]; then
      java -cp "$(tk_cp)" io.ticketing.testkit.Bench "$addr" "${BENCH_SECONDS:-5}" "${TICKETING_CI_LANG:-java}"
    fi
    # The blocking API on virtual threads, on a JDK 21+ when one is installed (the client's floor
    # stays Java 17): BENCH_JAVA21=/path/to/java, else the newest /usr/lib/jvm/*/bin/java >= 21.
    if [[ "${TICKETING_CI_LANG:-java}" == java ]]; then
      j21="${BENCH_JAVA21:-}"
      if [[ -z "$j21" ]]; then
        for j in /usr/lib/jvm/*/bin/java; do
          v=$("$j" -XshowSettings:properties -version 2>&1 | sed -nE 's/^ *java.specification.version = ([0-9]+).*/\1/p')
          [[ "$v" =~ ^[0-9]+$ ]] && (( v >= 21 )) && j21="$j"
        done
      fi
      if [[ -n "$j21" ]]; then
        "$j21" -cp "$(tk_cp)" io.ticketing.testkit.Bench "$addr" "${BENCH_SECONDS:-5}" java-virtual
      else
        echo "bench: no JDK 21+ found: no virtual-thread rows (set BENCH_JAVA21)" >&2
      fi
    fi
    ;;
  *)
    echo "usage: ci.sh toolchain|install|build|test|package-check|bench" >&2
    exit 2
    ;;
esac
