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

. "$here/llamabench_rounds.sh"

fail=0
for type in "$@"; do
    case $type in q4_k_m|q8_0) ;; *) echo "unknown type $type (q4_k_m, q8_0)" >&2; exit 2 ;; esac
    model="$work/qwen3moe-${layers}l-$type.gguf"
    if [ ! -f "$model" ]; then
        echo "== $type: writing $model (once; minutes)"
        "$bin/bench-bench" --synth qwen3moe "$type" "$model.part" "$layers" 512 || exit 1
        mv "$model.part" "$model"
    fi
    bench_model "$type" "$model" 4 1.00 0.70 || fail=1
done
exit $fail
