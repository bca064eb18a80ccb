# shellcheck shell=sh disable=SC2154 # $here, $llama, $work: the caller's
# bench/mtmd/common.sh: what bench/vs_mtmd.sh and bench/vs_mtmd_speed.sh
# share; sourced by them after they set $here (bench/), $llama (a
# llama.cpp checkout with build-mtmd/) and $work.

# mtmd_tool NAME: compiles bench/mtmd/NAME.c against $llama's libmtmd,
# libllama and libggml into $work/NAME.
mtmd_tool() {
    lb="$llama/build-mtmd/bin"
    cc -O2 -o "$work/$1" "$here/mtmd/$1.c" -I"$llama/include" -I"$llama/ggml/include" \
        -I"$llama/tools/mtmd" -L"$lb" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$lb"
}

# gradient_png PATH WxH: a deterministic RGB gradient PNG of that size.
gradient_png() {
python3 - "$1" "$2" <<'EOF_PY'
import struct, sys, zlib
w, h = (int(v) for v in sys.argv[2].split('x'))
raw = b''.join(b'\0' + bytes(v for x in range(w) for v in
                             ((x * 7 + y * 3) % 256, (x * y) % 256, (255 - x * 2 - y) % 256))
               for y in range(h))
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
                              + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
EOF_PY
}
