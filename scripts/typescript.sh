#!/usr/bin/env bash
# Makes ready the TypeScript Clerk (clients/typescript) for its build, its
# tests and the code generator scripts/genproto.sh runs from it: Debian's
# nodejs and npm if node is missing, then the package's npm dependencies,
# pinned in package-lock.json, with npm ci. Idempotent: npm ci runs again
# only when package-lock.json changed since the last install. Needs apt-get
# and root (or password-less sudo) to install Node; otherwise it says so
# and fails.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$scripts/../clients/typescript"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  "$scripts/apt.sh" "the TypeScript Clerk" nodejs npm
fi
stamp=node_modules/.slicerd-package-lock.json
if ! cmp -s package-lock.json "$stamp"; then
  npm ci --no-audit --no-fund --loglevel=error >&2
  cp package-lock.json "$stamp"
fi
