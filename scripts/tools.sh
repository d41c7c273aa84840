#!/usr/bin/env bash
# Installs the pinned code generators and tools slicerd's scripts use into
# .bin/ at the repository root. Idempotent: a tool already at its pinned
# version is not rebuilt. Everything comes from the Go module proxy.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.bin"
mkdir -p "$bin"

tools=(
  "buf github.com/bufbuild/buf/cmd/buf@v1.75.0"
  "protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
  "protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1"
)
if [ "${1:-}" = "--with-grpcurl" ]; then
  tools+=("grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl@${GRPCURL_VERSION:-v1.9.3}")
fi

for t in "${tools[@]}"; do
  name=${t%% *}
  pkg=${t#* }
  stamp="$bin/.$name.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$pkg" ]; then
    continue
  fi
  echo "installing $pkg" >&2
  GOBIN="$bin" GOFLAGS=-mod=mod go install "$pkg"
  echo "$pkg" >"$stamp"
done
