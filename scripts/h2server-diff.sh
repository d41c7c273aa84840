#!/usr/bin/env bash
# Shows how internal/h2server differs from the golang.org/x/net/http2 it
# was copied from: the version go.mod requires (taken from the module
# cache, downloaded if missing). Run it when golang.org/x/net is updated,
# and carry upstream's server fixes over by hand; see
# internal/h2server/doc.go.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(go mod download -json golang.org/x/net | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$dir" ]]; then
	echo "h2server-diff: golang.org/x/net is not in the module cache and could not be downloaded" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Upstream as the copy was made: the package renamed, build constraints
# and the module-internal import paths as in the copy.
normalise() {
	sed -e 's#^package http2 // import "golang.org/x/net/http2"#package h2server#' \
		-e 's#^package http2$#package h2server#' \
		-e '/^\/\/go:build/d' \
		-e 's#"golang.org/x/net/internal/\(httpcommon\|httpsfv\)"#"github.com/slicerd/slicerd/internal/h2server/internal/\1"#' "$1" | gofmt
}
status=0
for f in internal/h2server/*.go internal/h2server/internal/*/*.go; do
	base=$(basename "$f")
	case "$f" in
	internal/h2server/internal/*) up="$dir/internal/$(basename "$(dirname "$f")")/$base" ;;
	*) up="$dir/http2/$base" ;;
	esac
	[[ -f "$up" ]] || continue # slicerd's own files: doc.go, detach.go and tests
	normalise "$up" >"$tmp/upstream.go"
	diff -u --label "x/net: ${up#"$dir"/}" --label "$f" "$tmp/upstream.go" "$f" || status=1
done
exit "$status"
