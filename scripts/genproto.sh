#!/usr/bin/env bash
# Regenerates the Go code for api/proto into api/gen.
#   scripts/genproto.sh          regenerate in place
#   scripts/genproto.sh --check  lint, regenerate into a scratch copy, and fail
#                                if the committed api/gen differs from it
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/tools.sh"
export PATH="$root/.bin:$PATH"
cd "$root/api"
buf lint
if [ "${1:-}" = "--check" ]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  buf generate --output "$scratch"
  if ! diff -r "$scratch/gen" gen >/dev/null; then
    diff -r "$scratch/gen" gen | head -40 >&2 || true
    echo "api/gen is stale: run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  echo "api/gen is up to date"
else
  rm -rf gen
  buf generate
fi
