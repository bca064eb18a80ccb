#!/bin/sh
# vs_llamabench_moe.sh: issue 13's MoE speed check, corral beside
# llama.cpp's llama-bench on the same GGUF files, in one command.
#
# The model: Qwen3-30B-A3B's layout cut to 16 layers (dim 2048, 32 query /
# 4 KV heads of 128, 128 experts of FFN 768, 8 used; the llama-bpe
# vocabulary of 128256 stands in for Qwen's 151936), written by
# `bench-bench --synth qwen3moe TYPE OUT 16 512` in Q4_K_M (Q4_K, Q6_K for
# output / attn_v / ffn_down_exps) and Q8_0, cached under the work dir.
# 512: each tensor draws 512 random rows and repeats them, so a 6-10 GB
# file is written in minutes; every byte is still its own, and neither
# engine's speed depends on the values.
#
# Each round runs, one after the other (never two engines resident at once:
# the Q8_0 model is ~10 GB), with the order alternating between rounds:
#   corral:    bench-bench MODEL -t T -r 1 --no-load: in that one process,
#              the read bandwidth (a streaming read of a 1 GiB buffer on T
#              threads, median of 5, just before and after tg128, averaged),
#              pp512 (512 random tokens, empty cache) and tg128 (128
#              single-token evals), after a warm-up
#   llama.cpp: llama-bench -m MODEL -t T -p 512 -n 128 -r 1 -o jsonl (its
#              defaults otherwise: repacked CPU buffers, OpenMP)
# and prints each figure with the machine's load average. Medians over
# rounds give the ratios and verdicts (issue 13): tg128 >= 1.10x llama.cpp,
# pp512 >= 1.00x, and decode at >= 70% of the bandwidth limit,
#   fraction = tg128 [tokens/s] * bytes a token reads / bandwidth [bytes/s]
# per round (bandwidth of the same corral process), then the median.
# "Bytes a token reads" is counted by moe_token_bytes.py from the tensor
# sizes in the GGUF: every attention and norm tensor, the router, the
# output matrix, one row of token_embd, and of each ffn_{gate,up,down}_exps
# stack 8/128 of its bytes (the chosen experts' gate/up/down).
#
# corral's packed weights are cached on disk (CORRAL_PACK_CACHE=WORK/pack)
# so only the first round packs; loads are not timed here.
#
#   bench/vs_llamabench_moe.sh [--bin DIR] [--llama-bench PATH] [--work DIR]
#                              [-r ROUNDS] [-t THREADS] [--layers N] [TYPE...]
#
# TYPE: q4_k_m, q8_0 (default: both). --layers: fewer than 16 for a quick
# run of the script itself (not issue 13's figures). A type is skipped, saying so, when
# MemAvailable is below the file's size + 4 GB. Exit status 1 if a verdict
# fails or a run fails. Not a ctest: it takes ~20 minutes and gigabytes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
lb=/work/ref/llama.cpp/build/bin/llama-bench
work=${TMPDIR:-/tmp}/corral-vs-llamabench-moe
rounds=5
threads=2
layers=16
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift 2 ;;
    --llama-bench) lb=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    -*) echo "usage: $0 [--bin DIR] [--llama-bench PATH] [--work DIR] [-r ROUNDS] [-t THREADS] [--layers N] [q4_k_m|q8_0...]" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || set -- q4_k_m q8_0
[ "$rounds" -ge 1 ] || { echo "rounds must be >= 1" >&2; exit 2; }
[ -x "$bin/bench-bench" ] || { echo "no $bin/bench-bench (cmake --build build --target bench-bench)" >&2; exit 2; }
[ -x "$lb" ] || { echo "no llama-bench at $lb (--llama-bench PATH)" >&2; exit 2; }
mkdir -p "$work/pack"
export CORRAL_PACK_CACHE="$work/pack"

median() { # the median of the numbers on stdin
    sort -g | awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }

# ours MODEL LOG: prints "bw pp512 tg128" from bench-bench's median line
ours() {
    "$bin/bench-bench" "$1" -t "$threads" -r 1 --no-load >"$2" 2>&1 || return 1
    awk '/^median:/ {for (i = 1; i <= NF; i++) {if ($i == "bw") bw = $(i + 1);
         if ($i == "pp512") pp = $(i + 1); if ($i == "tg128") tg = $(i + 1)}}
         END {if (tg == "") exit 1; print bw, pp, tg}' "$2"
}

# theirs MODEL LOG: prints "pp512 tg128" from llama-bench's jsonl
theirs() {
    "$lb" -m "$1" -t "$threads" -p 512 -n 128 -r 1 -o jsonl >"$2" 2>"$2.err" || return 1
    python3 - "$2" <<'EOF_PY'
import json, sys
pp = tg = None
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("n_prompt") == 512 and r.get("n_gen") == 0:
        pp = r["avg_ts"]
    if r.get("n_gen") == 128 and r.get("n_prompt") == 0:
        tg = r["avg_ts"]
if pp is None or tg is None:
    sys.exit(1)
print(pp, tg)
EOF_PY
}

fail=0
for type in "$@"; do
    case $type in q4_k_m|q8_0) ;; *) echo "unknown type $type (q4_k_m, q8_0)" >&2; exit 2 ;; esac
    model="$work/qwen3moe-${layers}l-$type.gguf"
    if [ ! -f "$model" ]; then
        echo "== $type: writing $model (once; minutes)"
        "$bin/bench-bench" --synth qwen3moe "$type" "$model.part" "$layers" 512 || exit 1
        mv "$model.part" "$model"
    fi
    size=$(stat -c %s "$model")
    avail=$(awk '/^MemAvailable:/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
    if [ "$avail" -lt $((size + 4000000000)) ]; then
        echo "== $type: SKIPPED: MemAvailable $((avail / 1000000)) MB < file $((size / 1000000)) MB + 4 GB"
        fail=1
        continue
    fi
    bpt=$(python3 "$here/moe_token_bytes.py" "$model" | cut -d' ' -f1)
    echo "== $type: $model, $(awk "BEGIN {printf \"%.2f\", $size / 1e9}") GB file," \
         "$(awk "BEGIN {printf \"%.3f\", $bpt / 1e9}") GB read per token, $threads threads," \
         "$rounds rounds"
    printf '%-5s %-16s %8s %9s %9s %6s | %9s %9s %6s | %-16s\n' round "load (ours)" "bw GB/s" \
        pp512 tg128 "bw%" "lb pp512" "lb tg128" "bw%" "load (lb)"
    res="$work/$type.rounds"
    : >"$res"
    r=0
    while [ $r -lt "$rounds" ]; do
        # alternate who goes first, so drift in the machine's load is shared
        if [ $((r % 2)) -eq 0 ]; then
            l1=$(load_avg); o=$(ours "$model" "$work/$type.ours.$r.log") || o=
            l2=$(load_avg); t=$(theirs "$model" "$work/$type.lb.$r.jsonl") || t=
        else
            l2=$(load_avg); t=$(theirs "$model" "$work/$type.lb.$r.jsonl") || t=
            l1=$(load_avg); o=$(ours "$model" "$work/$type.ours.$r.log") || o=
        fi
        if [ -z "$o" ] || [ -z "$t" ]; then
            echo "round $r failed: corral '${o}' (log $work/$type.ours.$r.log), llama-bench '${t}' (log $work/$type.lb.$r.jsonl.err)"
            fail=1
            r=$((r + 1))
            continue
        fi
        echo "$o $t" | awk -v b="$bpt" -v r="$r" -v l1="$l1" -v l2="$l2" -v f="$res" '{
            fo = $3 * b / ($1 * 1e9); ft = $5 * b / ($1 * 1e9)
            printf "%-5d %-16s %8.1f %9.1f %9.2f %5.0f%% | %9.1f %9.2f %5.0f%% | %-16s\n",
                r, l1, $1, $2, $3, 100 * fo, $4, $5, 100 * ft, l2
            print $1, $2, $3, fo, $4, $5, ft >> f}'
        r=$((r + 1))
    done
    [ -s "$res" ] || { echo "== $type: no round completed"; fail=1; continue; }
    m() { awk -v c="$1" '{print $c}' "$res" | median | awk '{printf "%.4g\n", $1}'; }
    bw=$(m 1) pp=$(m 2) tg=$(m 3) fr=$(m 4) lpp=$(m 5) ltg=$(m 6) lfr=$(m 7)
    echo "$type medians: corral pp512 $pp tg128 $tg t/s, $(awk "BEGIN {printf \"%.0f\", 100 * $fr}")% of" \
         "the bandwidth limit (bw $bw GB/s) | llama-bench pp512 $lpp tg128 $ltg t/s," \
         "$(awk "BEGIN {printf \"%.0f\", 100 * $lfr}")% | load now $(load_avg)"
    awk -v t="$type" -v pp="$pp" -v tg="$tg" -v lpp="$lpp" -v ltg="$ltg" -v fr="$fr" 'BEGIN {
        rt = tg / ltg; rp = pp / lpp
        ok_t = (rt >= 1.10); ok_p = (rp >= 1.0); ok_f = (fr >= 0.70)
        printf "%s verdict: tg128 %.2fx (>= 1.10) %s; pp512 %.2fx (>= 1.00) %s; decode %.0f%% of bandwidth (>= 70%%) %s\n",
            t, rt, (ok_t ? "PASS" : "FAIL"), rp, (ok_p ? "PASS" : "FAIL"),
            100 * fr, (ok_f ? "PASS" : "FAIL")
        exit (ok_t && ok_p && ok_f) ? 0 : 1}' || fail=1
done
exit $fail
