#!/usr/bin/env bash
# Reproduces the tables of docs/balancing.md: every committed trace replayed
# through every algorithm, without redundancy and with it, then one long
# generated trace to show that the slice count stays bounded.
#
#   scripts/balancing.sh            # all tables, markdown on stdout
#   scripts/balancing.sh --quick    # the committed traces only
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/slicerd" .

# field NAME JSON: the number after "NAME": in one JSON line.
field() { sed -E "s/.*\"$1\":([-0-9.e+]+).*/\1/" <<<"$2"; }
fmt() { LC_ALL=C printf "%.${2}f" "$1"; }

echo "| trace | algorithm | max redundancy | mean imbalance | max imbalance | mean churn (width) | mean key churn | slices per task |"
echo "|---|---|---|---|---|---|---|---|"
for trace in power-law zipf diurnal failures; do
	for algo in static consistent-hash weighted-move; do
		for r in 1 3 10; do
			[[ $algo == static && $r != 1 ]] && continue # static cannot replicate
			s=$("$bin/slicerd" simulate --trace "sim/testdata/$trace.jsonl" --algo "$algo" --max-redundancy "$r" | tail -1)
			echo "| $trace | $algo | $r | $(fmt "$(field mean_imbalance "$s")" 3) | $(fmt "$(field max_imbalance "$s")" 3) | $(fmt "$(field mean_churn "$s")" 4) | $(fmt "$(field mean_key_churn "$s")" 3) | $(fmt "$(field mean_slices_per_task "$s")" 1) |"
		done
	done
done

echo
echo "| flash-crowd: min / max redundancy | replay | mean imbalance (mean bound) | held imbalance, mean / max | most churn in a decision | commits |"
echo "|---|---|---|---|---|---|"
for rr in "1 3" "2 5" "3 3" "3 5" "4 5"; do
	read -r lo hi <<<"$rr"
	for how in algorithm as-assigner; do
		flags=()
		[[ $how == as-assigner ]] && flags=(--as-assigner)
		out=$("$bin/slicerd" simulate --trace sim/testdata/flash-crowd.jsonl --min-redundancy "$lo" --max-redundancy "$hi" "${flags[@]}")
		s=$(tail -1 <<<"$out")
		most=$(head -n -1 <<<"$out" | sed -E 's/.*"churn":([-0-9.e+]+).*/\1/' | LC_ALL=C sort -g | tail -1)
		echo "| $lo / $hi | $how | $(fmt "$(field mean_imbalance "$s")" 3) ($(fmt "$(field mean_bound "$s")" 3)) | $(fmt "$(field mean_held_imbalance "$s")" 3) / $(fmt "$(field max_held_imbalance "$s")" 3) | $(fmt "$(LC_ALL=C awk "BEGIN{print 100*$most}")" 1)% | $(field changes "$s") |"
	done
done

[[ ${1:-} == --quick ]] && exit 0

echo
echo "| long trace | algorithm | max redundancy | windows | mean imbalance | mean key churn | slices per task (min / mean / max) |"
echo "|---|---|---|---|---|---|---|"
"$bin/slicerd" trace generate --workload power-law --windows 500 --seed 7 --out "$bin/long.jsonl"
for r in 1 3 10; do
	out=$("$bin/slicerd" simulate --trace "$bin/long.jsonl" --algo weighted-move --max-redundancy "$r")
	s=$(tail -1 <<<"$out")
	# Live tasks are 10 throughout this trace.
	read -r lo hi < <(head -n -1 <<<"$out" | sed -E 's/.*"slices":([0-9]+).*/\1/' | sort -n | sed -n '1p;$p' | paste -sd' ')
	echo "| power-law, seed 7 | weighted-move | $r | $(field windows "$s") | $(fmt "$(field mean_imbalance "$s")" 3) | $(fmt "$(field mean_key_churn "$s")" 3) | $((lo / 10)) / $(fmt "$(field mean_slices_per_task "$s")" 1) / $((hi / 10)) |"
done
