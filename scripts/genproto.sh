#!/usr/bin/env bash
# Regenerates the Go code for api/proto into api/gen, and for the kvcache
# example's API (examples/kvcache/proto) into examples/kvcache/gen.
#   scripts/genproto.sh          regenerate in place
#   scripts/genproto.sh --check  lint, check that the protos keep compatibility with
#                                the last release (buf breaking against
#                                api/released.binpb), regenerate into a scratch
#                                copy, and fail if the committed api/gen differs
#   scripts/genproto.sh --release record the protos as released: api/released.binpb
#                                is what later changes must stay compatible with
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/tools.sh"
export PATH="$root/.bin:$PATH"
cd "$root/api"
buf lint
if [ "${1:-}" = "--release" ]; then
  buf build --exclude-source-info -o released.binpb
  echo "api/released.binpb records the protos as released; commit it"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  # docs/api.md, "Compatibility": within slicer.v1 nothing released is
  # removed, renamed or renumbered.
  if ! buf breaking --against released.binpb; then
    echo "the protos break compatibility with the last release (api/released.binpb); see docs/api.md, \"Compatibility\"" >&2
    exit 1
  fi
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  for dir in api examples/kvcache; do
    cd "$root/$dir"
    [ "$dir" = api ] || buf lint
    buf generate --output "$scratch/$dir"
    if ! diff -r "$scratch/$dir/gen" gen >/dev/null; then
      diff -r "$scratch/$dir/gen" gen | head -40 >&2 || true
      echo "$dir/gen is stale: run scripts/genproto.sh and commit the result" >&2
      exit 1
    fi
    echo "$dir/gen is up to date"
  done
else
  for dir in api examples/kvcache; do
    cd "$root/$dir"
    [ "$dir" = api ] || buf lint
    rm -rf gen
    buf generate
  done
fi
