#!/bin/bash
# ab_overhead.sh: two builds' bench-overhead, alternated, for a change to
# the stack's per-token path (issue 18).
#
#   bench/ab_overhead.sh A_DIR B_DIR PAIRS [bench-overhead options...]
#
# A_DIR and B_DIR each hold a whole build's bin/ (cp -a build/bin X/):
# bench-overhead starts the services beside itself. Pairs run in ABBA
# order: in session 20, seven A-then-B pairs on tiny-spm put the second
# build 5% behind, and three B-then-A pairs of the same two builds put
# them level; the second run of a pair starts while the first one's
# processes and memory are still being given back. Prints each run's
# stream ratio (HTTP / engine alone) and the medians per build.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 A_DIR B_DIR PAIRS [bench-overhead options...]" >&2
    exit 2
fi
a=$1 b=$2 pairs=$3
shift 3
for d in "$a" "$b"; do
    [ -x "$d/bin/bench-overhead" ] || { echo "$0: no $d/bin/bench-overhead" >&2; exit 2; }
done

median() { # the median of the numbers on stdin
    sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then order="a b"; else order="b a"; fi
    for x in $order; do
        if [ "$x" = a ]; then dir=$a; else dir=$b; fi
        "$dir/bin/bench-overhead" "$@" >"$out/$x.$i" 2>&1 || true
        ratio=$(awk '/^stream/ {for (i = 1; i <= NF; i++) if ($i == "=") {print $(i + 1); exit}}' "$out/$x.$i")
        echo "${ratio:-failed}" >>"$out/$x.ratios"
        echo "pair $i $x: stream ${ratio:-failed}"
    done
done
echo "median stream ratio: A $(grep -v failed "$out/a.ratios" | median) ($a), B $(grep -v failed "$out/b.ratios" | median) ($b)"
