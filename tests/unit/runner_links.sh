#!/bin/sh
# runner_links.sh: corral-runner (and the scheduler, which discovers GPUs
# through NVML with dlopen) link no CUDA library: the CUDA backend is the
# module lib/corral/backend-cuda.so, loaded only when a plan wants a GPU, so
# one build starts on a host without CUDA. Where the build has the module,
# it exports only its entry and names the CUDA libraries itself.
set -eu
bin="$CORRAL_BUILD_DIR/bin"
mod="$CORRAL_BUILD_DIR/lib/corral/backend-cuda.so"
fail() { echo "runner_links: FAIL: $*"; exit 1; }
command -v readelf >/dev/null || { echo "runner_links: skipped: readelf absent (binutils)"; exit 77; }

needed() { readelf -d "$1" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; }
n=0
for prog in corral-runner corral-scheduler corral-node; do
    [ -x "$bin/$prog" ] || fail "$bin/$prog is not built"
    libs=$(needed "$bin/$prog")
    [ -n "$libs" ] || fail "readelf found no shared libraries in $prog"
    for lib in $libs; do
        case "$lib" in
        libcuda* | libcublas* | libnvidia* | libnvrtc* | libcufft* | libcurand*)
            fail "$prog links $lib" ;;
        esac
    done
    n=$((n + 1))
done
# ldd too: nothing reaches CUDA through another library
if command -v ldd >/dev/null && ldd "$bin/corral-runner" | grep -Eq 'libcuda|libcublas'; then
    fail "ldd corral-runner shows a CUDA library: $(ldd "$bin/corral-runner" | grep -E 'libcuda|libcublas')"
fi
if [ -f "$mod" ]; then
    mlibs=$(needed "$mod")
    echo "$mlibs" | grep -q '^libcudart' || fail "the module does not name libcudart: $mlibs"
    echo "$mlibs" | grep -q '^libcublas' || fail "the module does not name libcublas: $mlibs"
    exports=$(nm -D --defined-only "$mod" | awk '$2 ~ /^[TDBR]$/ { print $3 }')
    [ "$exports" = be_module_entry ] || fail "the module exports more than its entry: $exports"
    n=$((n + 1))
else
    echo "runner_links: this build has no CUDA module ($mod)"
fi
echo "runner_links: $n passed, 0 failed"
