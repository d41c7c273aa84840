#!/usr/bin/env bash
# Regenerates the Go code for api/proto into api/gen, the TypeScript code
# into clients/typescript/src/gen (protoc-gen-es from that package's npm
# dependencies, which scripts/typescript.sh installs), the descriptor set
# the Python Clerk builds its message classes from
# (clients/python/slicerd_clerk/slicer_v1.binpb), and the Go code for the
# kvcache example's API (examples/kvcache/proto) into examples/kvcache/gen.
#   scripts/genproto.sh          regenerate in place
#   scripts/genproto.sh --check  lint, check that the protos keep compatibility with
#                                the last release (buf breaking against
#                                api/released.binpb), regenerate into a scratch
#                                copy, and fail if the committed api/gen,
#                                clients/typescript/src/gen, Python descriptor
#                                set or examples/kvcache/gen differs
#   scripts/genproto.sh --release record the protos as released: api/released.binpb
#                                is what later changes must stay compatible with
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/tools.sh"
"$root/scripts/typescript.sh"
export PATH="$root/.bin:$root/clients/typescript/node_modules/.bin:$PATH"
ts_template=../clients/typescript/buf.gen.yaml
# The Python Clerk's descriptor set: every message of api/proto, without
# comments, so that it changes only when the messages do.
pyset=../clients/python/slicerd_clerk/slicer_v1.binpb
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
  # Each generated tree: the module it comes from, its template, where the
  # template puts it under the output directory, and where it is committed
  # (both relative to the module).
  check() {
    local dir=$1 template=$2 generated=$3 committed=$4
    cd "$root/$dir"
    [ "$dir" = api ] || buf lint
    rm -rf "$scratch/out"
    buf generate --template "$template" --output "$scratch/out"
    if ! diff -r "$scratch/out/$generated" "$committed" >/dev/null; then
      diff -r "$scratch/out/$generated" "$committed" | head -40 >&2 || true
      echo "$(realpath --relative-to="$root" "$committed") is stale: run scripts/genproto.sh and commit the result" >&2
      exit 1
    fi
    echo "$(realpath --relative-to="$root" "$committed") is up to date"
  }
  check api buf.gen.yaml gen gen
  check api "$ts_template" src/gen ../clients/typescript/src/gen
  cd "$root/api"
  buf build --exclude-source-info -o "$scratch/slicer_v1.binpb"
  if ! cmp -s "$scratch/slicer_v1.binpb" "$pyset"; then
    echo "clients/python/slicerd_clerk/slicer_v1.binpb is stale: run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  echo "clients/python/slicerd_clerk/slicer_v1.binpb is up to date"
  check examples/kvcache buf.gen.yaml gen gen
else
  rm -rf gen ../clients/typescript/src/gen
  buf generate
  buf generate --template "$ts_template" --output ../clients/typescript
  buf build --exclude-source-info -o "$pyset"
  cd "$root/examples/kvcache"
  buf lint
  rm -rf gen
  buf generate
fi
