#!/usr/bin/env bash
# Makes ready the Node.js task library (clients/node) for its tests:
# Debian's nodejs and npm if node is missing, then the library's one
# dependency (xxhash-wasm, pinned in package-lock.json) with npm ci.
# Idempotent: does nothing when both are there. Needs apt-get and root (or
# password-less sudo) to install Node; otherwise it says so and fails.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$scripts/../clients/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  "$scripts/apt.sh" "the Node task library's tests" nodejs npm
fi
if [ ! -d node_modules/xxhash-wasm ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
