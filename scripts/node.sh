#!/usr/bin/env bash
# Makes ready the Node.js task library (clients/node) for its tests:
# Debian's nodejs and npm if node is missing, then the library's one
# dependency (xxhash-wasm, pinned in package-lock.json) with npm ci.
# Idempotent: does nothing when both are there. Needs apt-get and root (or
# password-less sudo) to install Node; otherwise it says so and fails.
set -euo pipefail
cd "$(dirname "$0")/../clients/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "node.sh: no apt-get here; install Node.js 18 or later with npm" >&2
    exit 1
  fi
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "node.sh: installing nodejs needs root; run: sudo apt-get install nodejs npm" >&2
      exit 1
    fi
  fi
  echo "installing nodejs and npm (Debian packages) for the Node task library's tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ ! -d node_modules/xxhash-wasm ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
