#!/usr/bin/env bash
# The whole test suite: installs what the tests need (tools/install-deps.sh
# --test: only what is missing), a normal build with every ctest label,
# then an AddressSanitizer + UBSan build that runs the unit tests again,
# then a clang build of the libFuzzer harnesses (tests/fuzz) that fuzzes
# each decoder for a few seconds (CORRAL_FUZZ_SECONDS, default 4).
# Ends with a summary of each run: counts, and every skipped test with its
# reason.
# Usage: tests/run.sh   (from the repository root or anywhere)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${CORRAL_JOBS:-$(nproc)}

"$root/tools/install-deps.sh" --test

cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCORRAL_WERROR=ON >/dev/null
cmake --build "$root/build" -j "$jobs"
# Which SIMD levels this CPU runs, so the log says which kernels the suite
# exercised and which it never executed (also a ctest entry of its own).
"$root/build/bin/test_simd_levels"

junit1="$root/build/Testing/junit-all.xml"
junit2="$root/build-asan/Testing/junit-unit.xml"
junit3="$root/build-fuzz/Testing/junit-fuzz.xml"
rm -f "$junit1" "$junit2" "$junit3"
summary() {
    echo
    "$root/tests/summary.sh" "$junit1" "all labels, $root/build"
    [ -f "$junit2" ] && "$root/tests/summary.sh" "$junit2" "unit tests under ASan+UBSan, $root/build-asan"
    [ -f "$junit3" ] && "$root/tests/summary.sh" "$junit3" "fuzz harnesses, $root/build-fuzz"
    return 0
}
trap summary EXIT

ctest --test-dir "$root/build" --output-on-failure -j "$jobs" --output-junit "$junit1"

cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug \
      -DCORRAL_SANITIZE=ON -DCORRAL_CUDA=OFF -DCORRAL_WERROR=ON >/dev/null
cmake --build "$root/build-asan" -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" -L unit -LE slow \
    --output-junit "$junit2"

# The fuzz build: clang, every library with libFuzzer's coverage hooks and
# ASan+UBSan; only the harnesses are built (the other targets of this tree
# are never run).
CC=clang-14 cmake -S "$root" -B "$root/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCORRAL_FUZZ=ON -DCORRAL_CUDA=OFF -DCORRAL_WERROR=ON \
      -DCORRAL_FUZZ_SECONDS="${CORRAL_FUZZ_SECONDS:-4}" >/dev/null
cmake --build "$root/build-fuzz" -j "$jobs" --target corral_fuzz
ctest --test-dir "$root/build-fuzz" --output-on-failure -j "$jobs" -L fuzz \
    --output-junit "$junit3"
