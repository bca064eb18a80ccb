#!/usr/bin/env bash
# The whole test suite: a normal build with every ctest label, then an
# AddressSanitizer + UBSan build that runs the unit tests again.
# Usage: tests/run.sh   (from the repository root or anywhere)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${CORRAL_JOBS:-$(nproc)}

cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCORRAL_WERROR=ON >/dev/null
cmake --build "$root/build" -j "$jobs"
# Which SIMD levels this CPU runs, so the log says which kernels the suite
# exercised and which it never executed (also a ctest entry of its own).
"$root/build/bin/test_simd_levels"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug \
      -DCORRAL_SANITIZE=ON -DCORRAL_CUDA=OFF -DCORRAL_WERROR=ON >/dev/null
cmake --build "$root/build-asan" -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" -L unit -LE slow
