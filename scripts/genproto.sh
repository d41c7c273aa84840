#!/usr/bin/env bash
# Regenerates the Go code for api/proto into api/gen, and the TypeScript
# code into clients/typescript/src/gen (protoc-gen-es from that package's
# npm dependencies, which scripts/typescript.sh installs).
#   scripts/genproto.sh          regenerate in place
#   scripts/genproto.sh --check  lint, check that the protos keep compatibility with
#                                the last release (buf breaking against
#                                api/released.binpb), regenerate into a scratch
#                                copy, and fail if the committed api/gen or
#                                clients/typescript/src/gen differs
#   scripts/genproto.sh --release record the protos as released: api/released.binpb
#                                is what later changes must stay compatible with
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/tools.sh"
"$root/scripts/typescript.sh"
export PATH="$root/.bin:$root/clients/typescript/node_modules/.bin:$PATH"
ts_template=../clients/typescript/buf.gen.yaml
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
  buf generate --output "$scratch"
  if ! diff -r "$scratch/gen" gen >/dev/null; then
    diff -r "$scratch/gen" gen | head -40 >&2 || true
    echo "api/gen is stale: run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  echo "api/gen is up to date"
  buf generate --template "$ts_template" --output "$scratch/ts"
  if ! diff -r "$scratch/ts/src/gen" ../clients/typescript/src/gen >/dev/null; then
    diff -r "$scratch/ts/src/gen" ../clients/typescript/src/gen | head -40 >&2 || true
    echo "clients/typescript/src/gen is stale: run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  echo "clients/typescript/src/gen is up to date"
else
  rm -rf gen ../clients/typescript/src/gen
  buf generate
  buf generate --template "$ts_template" --output ../clients/typescript
fi
