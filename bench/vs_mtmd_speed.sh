#!/bin/sh
# vs_mtmd_speed.sh: issue 14's speed criterion: one 896x896 image through
# a gemma3-shaped tower (27 layers, dim 1152, 16 heads, ffn 4304, patch 14,
# 4096 patches pooled 4x4 to 256 tokens; synthetic weights, F16 matrices as
# in real gemma3 mmproj files, or F32 with --type f32) encoded by corral
# (bench-vision_encode) and by llama.cpp's libmtmd (bench/mtmd/time_mtmd.c)
# on 2 threads each, in interleaved rounds; prints each round, the medians
# and the ratio llama.cpp / corral (> 1: corral faster), and PASS when the
# ratio is >= 1.0. The clocks cover the encode only (weights loaded, image
# preprocessed). corral's first encode in its process also faults in the
# mapped weights (llama.cpp reads them into its buffers at load, and its
# load-time warm-up sizes the compute graph), so each corral process
# encodes twice and the second counts; llama.cpp's one encode counts.
# llama.cpp runs with mtmd's defaults (flash attention AUTO: enabled on
# the CPU backend; the log line is shown).
#
#   bench/vs_mtmd_speed.sh --llama DIR [--bin DIR] [--work DIR]
#                          [--rounds N] [--type f16|f32] [--layers N]
#
# --llama: a llama.cpp checkout with build-mtmd/ (as bench/vs_mtmd.sh);
# --bin: corral's build/bin (needs bench-vision_encode, corral-gguf-synth,
# corral-gemma3v-synth); --rounds: default 3; --layers: default 27 (fewer
# only to try the script out: the criterion is 27). Not a ctest: it needs
# llama.cpp and minutes of a quiet machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
work=${TMPDIR:-/tmp}/corral-vs-mtmd-speed
llama=
rounds=3
type=f16
layers=27
while [ $# -gt 0 ]; do
    case $1 in
    --llama) llama=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --type) type=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    *) echo "usage: $0 --llama DIR [--bin DIR] [--work DIR] [--rounds N] [--type f16|f32] [--layers N]" >&2
       exit 2 ;;
    esac
done
[ -n "$llama" ] || { echo "usage: $0 --llama DIR [--bin DIR] [--work DIR] [--rounds N] [--type f16|f32] [--layers N]" >&2; exit 2; }
mkdir -p "$work"
# shellcheck source=bench/mtmd/common.sh
. "$here/mtmd/common.sh"
mtmd_tool time_mtmd
timer="$work/time_mtmd"

text="$work/text.gguf"
proj="$work/gemma3-896-$type-$layers.mmproj.gguf"
img="$work/test-896.png"
"$bin/corral-gguf-synth" --out "$text" --seed 7 --arch gemma3 --image-tokens --window 16 \
    --swa-pattern 2 >/dev/null
[ -s "$proj" ] || "$bin/corral-gemma3v-synth" --out "$proj" --seed 11 --type "$type" \
    --image-size 896 --patch 14 --dim 1152 --heads 16 --ffn 4304 --layers "$layers" --merge 4 \
    --n-embd 64 >/dev/null
# a deterministic 896x896 RGB gradient (the size the tower takes: no resize)
gradient_png "$img" 896x896

ours="$work/ours.ms"
ref="$work/ref.ms"
: >"$ours"
: >"$ref"
i=1
while [ "$i" -le "$rounds" ]; do
    "$bin/bench-vision_encode" --mmproj "$proj" --image "$img" --threads 2 --rounds 2 \
        >"$work/ours.out" 2>"$work/ours.log" ||
        { echo "corral failed: $(tail -1 "$work/ours.log")"; exit 1; }
    o=$(sed -n 's/^encode \([0-9.]*\) ms$/\1/p' "$work/ours.out" | tail -1)
    "$timer" "$text" "$proj" "$img" 1 >"$work/ref.out" 2>"$work/ref.log" ||
        { echo "llama.cpp failed: $(tail -1 "$work/ref.log")"; exit 1; }
    r=$(sed -n 's/^encode \([0-9.]*\) ms$/\1/p' "$work/ref.out" | tail -1)
    echo "$o" >>"$ours"
    echo "$r" >>"$ref"
    printf 'round %d: corral %s ms, llama.cpp %s ms\n' "$i" "$o" "$r"
    i=$((i + 1))
done
printf 'corral: %s; %s\n' "$(sed -n 1p "$work/ours.out")" "$(tail -1 "$work/ours.out") tokens x width"
printf 'llama.cpp: %s; %s tokens x width\n' \
    "$(grep -o 'flash attention is [a-z]*' "$work/ref.log" | tail -1)" "$(tail -1 "$work/ref.out")"
python3 - "$ours" "$ref" <<'EOF_PY'
import statistics, sys
o = [float(v) for v in open(sys.argv[1]).read().split()]
r = [float(v) for v in open(sys.argv[2]).read().split()]
mo, mr = statistics.median(o), statistics.median(r)
ratio = mr / mo
print('median encode: corral %.1f ms, llama.cpp %.1f ms, 2 threads each: %.2fx (llama.cpp / corral)'
      % (mo, mr, ratio))
print('PASS' if ratio >= 1.0 else 'FAIL', '(issue 14: >= 1.0x)')
sys.exit(0 if ratio >= 1.0 else 1)
EOF_PY
