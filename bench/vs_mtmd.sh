#!/bin/sh
# vs_mtmd.sh: corral's image embeddings and normalized pixel tensor against
# llama.cpp's multimodal library (libmtmd) on the same synthetic
# projectors (llava-shaped, gemma3, Pixtral, and qwen2.5-vl's and
# qwen2-vl's with a qwen2vl M-RoPE text model; Ollama's single files for
# gemma3, mistral3 and qwen2.5-vl), text model and fixed test PNGs (issue 14's
# fidelity rule): every embedding row's cosine >= 0.999 (gemma3:
# >= 0.9999), every pixel
# within 1e-5, and the logits after a prompt holding the image ("describe
# IMAGE now": BOS, text, the image's rows, text) cosine >= 0.999. Also the whole output's relative error (RMS of the
# difference over RMS of llama.cpp's) <= 3e-3: the cosine alone does not
# tell GELU from quick GELU on these towers (0.99993), the relative error
# does (1e-2, against <= 1.2e-3 for corral's F16 K/V rounding and
# summation order). The Pixtral cases size the 97x61 image three ways
# (scaled up to 8 tokens with patch 14; rounded to the grid with patch 4;
# scaled down to 1024 tokens with patch 1), with and without the patch
# merger, SiLU and GELU gating, and a mistral3 text model; their rows
# include the [IMG_BREAK] rows, their logits prompt the [IMG_END] text.
#
#   bench/vs_mtmd.sh --llama DIR [--bin DIR] [--work DIR] [CASE...]
#
# --llama: a llama.cpp checkout whose build-mtmd/ holds libmtmd, libllama
# and libggml (cmake -B build-mtmd -DLLAMA_CURL=OFF, target mtmd); the
# script compiles bench/mtmd/dump_mtmd.c against it. --bin: corral's
# build/bin. CASE: a label from the table below (default: all). Not a
# ctest: it needs llama.cpp, which CI does not have (tests/unit/test_clip.c
# checks the tower against a scalar reference instead).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
work=${TMPDIR:-/tmp}/corral-vs-mtmd
llama=
while [ $# -gt 0 ]; do
    case $1 in
    --llama) llama=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) break ;;
    esac
done
[ -n "$llama" ] || { echo "usage: $0 --llama DIR [--bin DIR] [--work DIR] [CASE...]" >&2; exit 2; }
mkdir -p "$work"
# shellcheck source=bench/mtmd/common.sh
. "$here/mtmd/common.sh"
mtmd_tool dump_mtmd
dump="$work/dump_mtmd"

# The fixed test images: 97x61 RGB, a deterministic gradient (not square,
# so the letterbox and the resampling both run), and the same gradient at
# 300x200 (qwen2.5-vl: 11 x 7 merged patches, six attention windows, the
# last ones cut by the edges).
for size in 97x61 300x200; do
    gradient_png "$work/test-$size.png" "$size"
done

# label ; projector writer and its arguments ; text model arguments ;
# image ; the prompt for mtmd ; the same prompt for corral
# qwen2.5-vl: mtmd wraps the image in <|vision_start|> ... <|vision_end|>,
# which the synthetic vocabulary tokenizes as plain text; mtmd tokenizes
# them as fragments of their own, so the prompts hold nothing else (text
# next to them tokenizes differently in the two engines on this
# vocabulary). The text model (std 0.1, rope base 100) is sharp enough for
# the image's M-RoPE positions to matter (without them: logits cosine
# 0.93). --wa-pattern 3: blocks 0, 1 windowed, 2 full, 3 windowed.
# gemma3: the text model's sliding window (16) binds inside the image;
# gemma3-single, pixtral-single and qwen25vl-single give llama.cpp the
# mmproj and corral Ollama's single file (the text model with the same
# tower inside, under Ollama's names: pixtral's q/k rows in Hugging Face's
# order, its [IMG_BREAK] row the text model's); qwen2vl-* are Qwen2-VL's
# projector ("qwen2vl_merger"); gemma3-896 (the speed
# shape: 896 px, 27 layers, dim 1152) runs only when named.
g3t='--arch gemma3 --image-tokens --window 16 --swa-pattern 2'
cases="
llava-f32;corral-clip-synth --type f32;;97x61;describe <__media__> now;describe [img-0] now
llava-f16;corral-clip-synth --type f16;;97x61;describe <__media__> now;describe [img-0] now
llava-gelu;corral-clip-synth --type f32 --gelu;;97x61;describe <__media__> now;describe [img-0] now
llava-336;corral-clip-synth --type f16 --image-size 336 --patch 14 --dim 128 --heads 8 --ffn 320 --layers 4 --hidden 256;;97x61;describe <__media__> now;describe [img-0] now
pixtral-f32;corral-clip-synth --pixtral --type f32;;97x61;describe <__media__> now;describe [img-0] now
pixtral-f16;corral-clip-synth --pixtral --type f16;;97x61;describe <__media__> now;describe [img-0] now
pixtral-nomerge;corral-clip-synth --pixtral --type f32 --merge 1;;97x61;describe <__media__> now;describe [img-0] now
pixtral-gelu;corral-clip-synth --pixtral --type f32 --gelu;;97x61;describe <__media__> now;describe [img-0] now
pixtral-round;corral-clip-synth --pixtral --type f32 --patch 4;;97x61;describe <__media__> now;describe [img-0] now
pixtral-max;corral-clip-synth --pixtral --type f32 --patch 1;;97x61;describe <__media__> now;describe [img-0] now
pixtral-mistral3;corral-clip-synth --pixtral --type f16;--arch mistral3;97x61;describe <__media__> now;describe [img-0] now
pixtral-single;corral-clip-synth --pixtral --type f16;--arch mistral3 --pixtral-tokens;97x61;describe <__media__> now;describe [img-0] now
qwen25vl-f32;corral-qwen2vl-synth --type f32 --wa-pattern 3;--arch qwen2vl --std 0.1 --rope-base 100;300x200;<__media__>;<|vision_start|>[img-0]<|vision_end|>
qwen25vl-f16;corral-qwen2vl-synth --type f16 --wa-pattern 3;--arch qwen2vl --std 0.1 --rope-base 100;300x200;<__media__>;<|vision_start|>[img-0]<|vision_end|>
qwen25vl-small;corral-qwen2vl-synth --type f32 --dim 80 --heads 5 --ffn 128 --hidden 320;--arch qwen2vl --std 0.1 --rope-base 100;97x61;<__media__>;<|vision_start|>[img-0]<|vision_end|>
qwen25vl-single;corral-qwen2vl-synth --type f16 --wa-pattern 3;--arch qwen2vl --std 0.1 --rope-base 100;300x200;<__media__>;<|vision_start|>[img-0]<|vision_end|>
qwen2vl-f32;corral-qwen2vl-synth --type f32 --qwen2;--arch qwen2vl --std 0.1 --rope-base 100;300x200;<__media__>;<|vision_start|>[img-0]<|vision_end|>
qwen2vl-f16;corral-qwen2vl-synth --type f16 --qwen2;--arch qwen2vl --std 0.1 --rope-base 100;97x61;<__media__>;<|vision_start|>[img-0]<|vision_end|>
gemma3-f32;corral-gemma3v-synth --type f32;$g3t;97x61;describe <__media__> now;describe [img-0] now
gemma3-f16;corral-gemma3v-synth --type f16;$g3t;97x61;describe <__media__> now;describe [img-0] now
gemma3-merge2;corral-gemma3v-synth --type f16 --image-size 112 --merge 2 --dim 128 --heads 8 --ffn 320 --layers 4;$g3t;97x61;describe <__media__> now;describe [img-0] now
gemma3-single;corral-gemma3v-synth --type f16;$g3t;97x61;describe <__media__> now;describe [img-0] now
gemma3-896;corral-gemma3v-synth --type f16 --image-size 896 --dim 1152 --heads 16 --ffn 4304 --layers 27 --n-embd 64;$g3t;97x61;describe <__media__> now;describe [img-0] now
"
fail=0
while IFS=';' read -r label writer targs size rprompt oprompt; do
    [ -n "$label" ] || continue
    if [ $# -gt 0 ]; then
        want=0
        for c in "$@"; do [ "$c" = "$label" ] && want=1; done
        [ $want -eq 1 ] || continue
    elif [ "$label" = gemma3-896 ]; then
        continue
    fi
    proj="$work/$label.mmproj.gguf"
    text="$work/$label.text.gguf"
    img="$work/test-$size.png"
    # shellcheck disable=SC2086 # word lists by design
    "$bin/corral-gguf-synth" --out "$text" --seed 7 $targs >/dev/null
    # llama.cpp's converter copies [IMG_BREAK]'s row from the text model;
    # Ollama's single file reads it there (pixtral-single)
    extra=
    case $label in pixtral*-single) extra="--break-from $text" ;; esac
    # shellcheck disable=SC2086
    "$bin/"$writer --out "$proj" --seed 11 $extra
    ours_model=$text
    ours_proj=$proj
    case $label in
    *-single)
        ours_model="$work/$label.single.gguf"
        ours_proj=$ours_model
        # shellcheck disable=SC2086
        "$bin/"$writer --out "$ours_model" --embed "$text" --seed 11 ;;
    esac
    if ! "$dump" "$text" "$proj" "$img" "$work/$label.ref.f32" \
            "$work/$label.ref.px" "$rprompt" "$work/$label.ref.logits" \
            >"$work/$label.ref.out" 2>"$work/$label.ref.log"; then
        printf '%-12s llama.cpp failed: %s\n' "$label" "$(tail -1 "$work/$label.ref.log")"
        fail=1
        continue
    fi
    if ! "$bin/corral-runner" image-embed --model "$ours_model" --mmproj "$ours_proj" \
            --image "$img" --out "$work/$label.ours.f32" --threads 2 \
            --pixels "$work/$label.ours.px" --prompt "$oprompt" \
            --logits "$work/$label.ours.logits" >"$work/$label.ours.log" 2>&1; then
        printf '%-12s corral failed: %s\n' "$label" "$(tail -1 "$work/$label.ours.log")"
        fail=1
        continue
    fi
    printf '%-12s ' "$label"
    python3 - "$work/$label" <<'EOF_PY' || fail=1
import math, struct, sys
def load(p):
    d = open(p, 'rb').read()
    return struct.unpack('<%df' % (len(d) // 4), d)
b = sys.argv[1]
rp, op = load(b + '.ref.px'), load(b + '.ours.px')
re, oe = load(b + '.ref.f32'), load(b + '.ours.f32')
ok = len(rp) == len(op) and len(re) == len(oe)
px = max(abs(x - y) for x, y in zip(rp, op)) if ok else float('inf')
import re as regex
shape = regex.search(r'^(\d+) x (\d+)$', open(b + '.ours.log').read(), regex.M)  # "N x D"
n, dim = (int(shape.group(1)), int(shape.group(2))) if shape else (0, 1)
ok = ok and shape is not None
ok = ok and len(re) == n * dim
worst = 1.0
for r in range(n if ok else 0):
    a, c = re[r * dim:(r + 1) * dim], oe[r * dim:(r + 1) * dim]
    dot = sum(x * y for x, y in zip(a, c))
    na, nc = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in c))
    worst = min(worst, dot / (na * nc) if na and nc else 0.0)
num = sum((x - y) ** 2 for x, y in zip(re, oe)) if ok else 1.0
den = sum(x * x for x in re) if ok else 1.0
rel = math.sqrt(num / den) if den else float('inf')
rl, ol = load(b + '.ref.logits'), load(b + '.ours.logits')
lcos = 0.0
if len(rl) == len(ol) and rl:
    dot = sum(x * y for x, y in zip(rl, ol))
    lcos = dot / math.sqrt(sum(x * x for x in rl) * sum(y * y for y in ol))
min_cos = 0.9999 if b.rsplit('/', 1)[-1].startswith('gemma3') else 0.999
good = ok and px <= 1e-5 and worst >= min_cos and rel <= 3e-3 and lcos >= 0.999
print('%s  %d tokens: pixels max |diff| %.2e, worst row cosine %.7f, relative error %.1e, '
      'logits cosine %.7f' % ('ok  ' if good else 'FAIL', n, px, worst, rel, lcos))
def ms(path, pat):
    m = regex.search(pat, open(path, errors='replace').read())
    return float(m.group(1)) if m else None
tr = ms(b + '.ref.log', r'image slice encoded in ([0-9.]+) ms')
to = ms(b + '.ours.log', r'image encoded in ([0-9.]+) ms')
if tr and to:
    print('             encode (one run, noisy): llama.cpp %.1f ms, corral %.1f ms, 2 threads each: %.2fx' %
          (tr, to, tr / to))
sys.exit(0 if good else 1)
EOF_PY
done <<EOF_CASES
$cases
EOF_CASES
exit $fail
