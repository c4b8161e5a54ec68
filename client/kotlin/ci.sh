#!/usr/bin/env bash
# The Kotlin client is built, tested and benchmarked by client/java/ci.sh (one Maven build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TICKETING_CI_LANG=kotlin exec "$here/../java/ci.sh" "$@"
