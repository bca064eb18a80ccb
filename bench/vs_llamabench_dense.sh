#!/bin/sh
# vs_llamabench_dense.sh: issue 18's dense one-stream speed check, corral
# beside llama.cpp's llama-bench on the same GGUF files, in one command.
#
# The models: TinyLlama-1.1B's and Llama-3.2-1B's shapes, written by
# `bench-bench --synth SHAPE TYPE OUT LAYERS 512` in Q4_0, Q8_0, Q4_K_M
# (Q4_K, Q6_K for output / attn_v / ffn_down) and Q6_K, cached under the
# work dir. 512: each tensor draws 512 random rows and repeats them, so a
# file is written in a minute; every byte is still its own, and neither
# engine's speed depends on the values.
#
# Each round runs, one after the other, with the order alternating between
# rounds (as bench/vs_llamabench_moe.sh):
#   corral:    bench-bench MODEL -t T -r 1 --no-load: in that one process,
#              the read bandwidth (a streaming read of a 1 GiB buffer, on
#              2 MiB pages as the packed weights, on T
#              threads, median of 5, just before and after tg128, averaged),
#              pp512 (512 random tokens, empty cache) and tg128 (128
#              single-token evals), after a warm-up
#   llama.cpp: llama-bench -m MODEL -t T -p 512 -n 128 -r 1 -o jsonl (its
#              defaults otherwise: repacked CPU buffers, OpenMP)
# and prints each figure with the machine's load average. Medians over
# rounds give the ratios and verdicts (issue 18): tg128 >= 1.10x llama.cpp,
# pp512 >= 1.20x, and decode at >= 85% of the bandwidth limit,
#   fraction = tg128 [tokens/s] * bytes a token reads / bandwidth [bytes/s]
# per round (bandwidth of the same corral process), then the median.
# "Bytes a token reads" is counted by moe_token_bytes.py from the tensor
# sizes in the GGUF: every matrix and norm once, one row of token_embd (all
# of it for Llama-3.2's tied output).
#
# corral's packed weights are cached on disk (CORRAL_PACK_CACHE=WORK/pack)
# so only the first round packs; loads are not timed here.
#
#   bench/vs_llamabench_dense.sh [--bin DIR] [--llama-bench PATH] [--work DIR]
#                                [-r ROUNDS] [-t THREADS] [--layers N]
#                                [--shape tinyllama|llama32] [TYPE...]
#
# TYPE: q4_0, q8_0, q4_k_m, q6_k (default: all four); --shape: one shape
# (default: both). --layers: fewer than the shape's (22, 16) for a quick run
# of the script itself (not issue 18's figures). A model is skipped, saying
# so, when MemAvailable is below the file's size + 2 GB. Exit status 1 if a
# verdict fails or a run fails. Not a ctest: it takes ~30 minutes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
lb=/work/ref/llama.cpp/build/bin/llama-bench
work=${TMPDIR:-/tmp}/corral-vs-llamabench-dense
rounds=5
threads=2
layers=
shapes="tinyllama llama32"
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift 2 ;;
    --llama-bench) lb=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --shape) shapes=$2; shift 2 ;;
    -*) echo "usage: $0 [--bin DIR] [--llama-bench PATH] [--work DIR] [-r ROUNDS] [-t THREADS] [--layers N] [--shape tinyllama|llama32] [q4_0|q8_0|q4_k_m|q6_k...]" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || set -- q4_0 q8_0 q4_k_m q6_k
[ "$rounds" -ge 1 ] || { echo "rounds must be >= 1" >&2; exit 2; }
for shape in $shapes; do
    case $shape in tinyllama|llama32) ;; *) echo "unknown shape $shape (tinyllama, llama32)" >&2; exit 2 ;; esac
done
for type in "$@"; do
    case $type in q4_0|q8_0|q4_k_m|q6_k) ;; *) echo "unknown type $type (q4_0, q8_0, q4_k_m, q6_k)" >&2; exit 2 ;; esac
done
[ -x "$bin/bench-bench" ] || { echo "no $bin/bench-bench (cmake --build build --target bench-bench)" >&2; exit 2; }
[ -x "$lb" ] || { echo "no llama-bench at $lb (--llama-bench PATH)" >&2; exit 2; }
mkdir -p "$work/pack"
export CORRAL_PACK_CACHE="$work/pack"

. "$here/llamabench_rounds.sh"

fail=0
for shape in $shapes; do
for type in "$@"; do
    nl=$layers
    [ -n "$nl" ] || { [ "$shape" = tinyllama ] && nl=22 || nl=16; }
    name="$shape-${nl}l-$type"
    model="$work/$name.gguf"
    if [ ! -f "$model" ]; then
        echo "== $name: writing $model (once)"
        "$bin/bench-bench" --synth "$shape" "$type" "$model.part" "$nl" 512 || exit 1
        mv "$model.part" "$model"
    fi
    bench_model "$name" "$model" 2 1.20 0.85 || fail=1
done
done
exit $fail
