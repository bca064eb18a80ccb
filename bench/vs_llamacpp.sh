#!/bin/sh
# vs_llamacpp.sh: corral's logits against llama.cpp's on the same synthetic
# GGUF, for every architecture and tensor type corral runs (issue 13's
# fidelity rule): a prompt of 16 ids, then 32 greedy steps taken by
# llama.cpp; corral evaluates the whole sequence teacher-forced and
# compare_logits.py checks every row's cosine (>= 0.9999 for F32/F16,
# >= 0.999 for quantized types) and the argmax wherever llama.cpp's own
# top-1/top-2 margin exceeds 0.01.
#
# qwen2vl: llama.cpp's loader for it (src/models/qwen2vl.cpp at de3ff815)
# never reads attention.layer_norm_rms_epsilon, so its RMSNorms run with
# eps 0 while corral takes the file's (1e-5 here): cosine 0.99996 from
# that alone, already at position 0 where rope does nothing.
#
# llama.cpp runs with flash attention off unless --fa: corral's attention
# rounds where llama.cpp's non-flash path does (scores in F32, KV in F16),
# while its flash path (on by default on CPU) rounds Q and the softmax
# differently, and differs from its own non-flash path by more than the
# quantized threshold on the harder --std 0.08 models (Q6_K: cosine
# 0.99868, 3 argmax flips between llama.cpp's two paths, 2026-12-01).
#
#   bench/vs_llamacpp.sh --dump PATH [--bin DIR] [--work DIR] [--std F] [--fa]
#                        [--kv q8_0|q4_0] [CASE...]
#
# --dump: a program that writes llama.cpp's logits (dump-logits MODEL "ids"
# OUT, with DUMP_GREEDY=N for N greedy steps, printing every id), built by
# you against your llama.cpp; corral does not ship one. --bin: corral's
# build/bin. --std: the synthetic weights' standard deviation (default
# 0.02, the synth's; larger makes a model whose logits amplify rounding
# differences more, a harder test). --kv: both engines store the KV cache in
# that type (dump-logits' fifth argument, corral-runner logits
# --kv-cache-type); llama.cpp needs flash attention for it, so --kv implies
# --fa. CASE: a label from the table below (default: all). Not a
# ctest: it needs llama.cpp, which CI does not have.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
work=${TMPDIR:-/tmp}/corral-vs-llamacpp
dump=
std=
fa=0
kv=
while [ $# -gt 0 ]; do
    case $1 in
    --dump) dump=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --std) std="--std $2"; shift 2 ;;
    --fa) fa=1; shift ;;
    --kv) kv=$2; fa=1; shift 2 ;;
    *) break ;;
    esac
done
[ -n "$dump" ] || { echo "usage: $0 --dump PATH [--bin DIR] [--work DIR] [--std F] [--fa] [--kv q8_0|q4_0] [CASE...]" >&2; exit 2; }
mkdir -p "$work"

# label | minimum cosine | corral-gguf-synth arguments
cases='
llama-f32|0.9999|--arch llama --type f32
llama-f16|0.9999|--arch llama --type f16
llama-q8_0|0.999|--arch llama --type q8_0
llama-q4_0|0.999|--arch llama --type q4_0
llama-q6_k|0.999|--arch llama --type q6_k
llama-bf16|0.9999|--arch llama --type bf16
llama-linear|0.9999|--arch llama --type f32 --rope-linear 4
llama-yarn|0.9999|--arch llama --type f32 --rope-yarn 4 --yarn-orig-ctx 64
qwen2-f32|0.9999|--arch qwen2 --type f32
qwen3-f32|0.9999|--arch qwen3 --type f32 --head-dim 32
gemma2-f32|0.9999|--arch gemma2 --type f32 --window 8 --swa-pattern 2 --attn-softcap 50 --final-softcap 30 --tied
gemma3-f32|0.9999|--arch gemma3 --type f32 --window 8 --swa-pattern 6 --tied
phi3-f32|0.9999|--arch phi3 --type f32
llama-iq4_nl|0.999|--arch llama --type iq4_nl
llama-iq4_xs|0.999|--arch llama --type iq4_xs
llama-mxfp4|0.999|--arch llama --type mxfp4
llama-iq2_xxs|0.999|--arch llama --type iq2_xxs
llama-iq2_xs|0.999|--arch llama --type iq2_xs
llama-iq2_s|0.999|--arch llama --type iq2_s
llama-iq3_xxs|0.999|--arch llama --type iq3_xxs
llama-iq3_s|0.999|--arch llama --type iq3_s
llama-iq1_s|0.999|--arch llama --type iq1_s
qwen3moe-f32|0.9999|--arch qwen3moe --type f32 --head-dim 32 --experts 16 --experts-used 4 --expert-ffn 128
qwen3moe-q8_0|0.999|--arch qwen3moe --type q8_0 --head-dim 32 --experts 16 --experts-used 4 --expert-ffn 128
mixtral-f32|0.9999|--arch llama --type f32 --experts 8 --experts-used 2
granite-f32|0.9999|--arch granite --type f32
olmo2-f32|0.9999|--arch olmo2 --type f32
mistral3-f32|0.9999|--arch mistral3 --type f32 --head-dim 32
exaone-f32|0.9999|--arch exaone --type f32
exaone4-f32|0.9999|--arch exaone4 --type f32
smollm3-f32|0.9999|--arch smollm3 --type f32
command-r-f32|0.9999|--arch command-r --type f32 --tied
cohere2-f32|0.9999|--arch cohere2 --type f32 --tied --window 8
qwen2vl-f32|0.9999|--arch qwen2vl --type f32 --head-dim 32
qwen2vl-f16|0.9999|--arch qwen2vl --type f16 --head-dim 32
gpt-oss-f32|0.9999|--arch gpt-oss --type f32 --head-dim 64 --experts 8 --experts-used 2 --expert-ffn 256 --window 8 --rope-yarn 32 --yarn-orig-ctx 4096 --rope-base 150000
gpt-oss-mxfp4|0.999|--arch gpt-oss --type q8_0 --expert-type mxfp4 --head-dim 64 --experts 8 --experts-used 2 --expert-ffn 256 --window 8 --rope-yarn 32 --yarn-orig-ctx 4096 --rope-base 150000
'
prompt="1 17 42 99 7 250 3 64 128 5 77 31 200 11 9 150"
fail=0
while IFS='|' read -r label mincos args; do
    [ -n "$label" ] || continue
    if [ $# -gt 0 ]; then
        want=0
        for c in "$@"; do [ "$c" = "$label" ] && want=1; done
        [ $want -eq 1 ] || continue
    fi
    model="$work/$label.gguf"
    # shellcheck disable=SC2086 # args is a word list by design
    "$bin/corral-gguf-synth" --out "$model" --seed 7 --layers 4 --dim 256 \
        --heads 8 --kv-heads 4 --ffn 512 --ctx 256 $std $args >/dev/null
    if [ $fa -eq 1 ]; then unset DUMP_NO_FA; else export DUMP_NO_FA=1; fi
    # shellcheck disable=SC2086 # empty without --kv
    if ! ids=$(DUMP_GREEDY=32 "$dump" "$model" "$prompt" "$work/$label.ref.f32" \
               ${kv:+- $kv} 2>"$work/$label.ref.log"); then
        printf '%-14s llama.cpp failed: %s\n' "$label" "$(tail -1 "$work/$label.ref.log")"
        fail=1
        continue
    fi
    # shellcheck disable=SC2086 # empty without --kv
    if ! "$bin/corral-runner" logits --model "$model" --tokens "$ids" \
            --out "$work/$label.ours.f32" ${kv:+--kv-cache-type $kv} \
            2>"$work/$label.ours.log"; then
        printf '%-14s corral failed: %s\n' "$label" "$(tail -1 "$work/$label.ours.log")"
        fail=1
        continue
    fi
    n_vocab=$(( $(stat -c %s "$work/$label.ref.f32") / 4 / ($(echo "$ids" | wc -w) - 1) ))
    printf '%-14s ' "$label"
    python3 "$here/compare_logits.py" "$work/$label.ref.f32" "$work/$label.ours.f32" \
        "$n_vocab" --min-cos "$mincos" || fail=1
done <<EOF_CASES
$cases
EOF_CASES
exit $fail
