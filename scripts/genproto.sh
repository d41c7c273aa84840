#!/usr/bin/env bash
# Regenerates the Go code for api/proto into api/gen, and the descriptor set
# the Python Clerk builds its message classes from
# (clients/python/slicerd_clerk/slicer_v1.binpb).
#   scripts/genproto.sh          regenerate in place
#   scripts/genproto.sh --check  lint, check that the protos keep compatibility with
#                                the last release (buf breaking against
#                                api/released.binpb), regenerate into a scratch
#                                copy, and fail if the committed api/gen or
#                                descriptor set differs
#   scripts/genproto.sh --release record the protos as released: api/released.binpb
#                                is what later changes must stay compatible with
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/tools.sh"
export PATH="$root/.bin:$PATH"
cd "$root/api"
buf lint
# The Python Clerk's descriptor set: every message of api/proto, without
# comments, so that it changes only when the messages do.
pyset=../clients/python/slicerd_clerk/slicer_v1.binpb
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
  buf generate --output "$scratch"
  if ! diff -r "$scratch/gen" gen >/dev/null; then
    diff -r "$scratch/gen" gen | head -40 >&2 || true
    echo "api/gen is stale: run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  buf build --exclude-source-info -o "$scratch/slicer_v1.binpb"
  if ! cmp -s "$scratch/slicer_v1.binpb" "$pyset"; then
    echo "clients/python/slicerd_clerk/slicer_v1.binpb is stale: run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  echo "api/gen and the Python descriptor set are up to date"
else
  rm -rf gen
  buf generate
  buf build --exclude-source-info -o "$pyset"
fi
