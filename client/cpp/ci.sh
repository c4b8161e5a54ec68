#!/usr/bin/env bash
# The C++ client (ticketing.hpp) is built and tested with the C library in client/c.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../c/ci.sh" "$@"
