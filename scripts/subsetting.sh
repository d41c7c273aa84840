#!/usr/bin/env bash
# Reproduces the tables of docs/subsetting.md: Rocksteadier subsetting
# against Ringsteady, deterministic and random subsetting over a grid of
# frontend counts, backend counts and subset sizes. Markdown on stdout; the
# figures are deterministic, so a second run prints the same bytes.
#
#   scripts/subsetting.sh           # the tables (a few seconds)
#   scripts/subsetting.sh --bench   # also the package's Go benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."

go run ./subset/cmd/subsetting

if [[ ${1:-} == --bench ]]; then
	echo
	echo '```'
	go test -run '^$' -bench . -benchtime 300ms -count 1 ./subset | grep -E '^(Benchmark|cpu:)'
	echo '```'
fi
