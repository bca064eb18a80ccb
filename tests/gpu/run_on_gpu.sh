#!/usr/bin/env bash
# run_on_gpu.sh: the one script to run on a machine with an NVIDIA GPU.
# Builds the CUDA backend, its tests and bench-cuda (Release, warnings as
# errors), runs every `gpu`-labelled test plus test_cuda_host, then
# bench-cuda on the Llama-3.1-8B shape in Q4_K_M and Q8_0 and on the
# Llama-3.2-1B shape in Q4_K_M. Everything is logged to $OUT (or
# ./gpu-results). Usage: tests/gpu/run_on_gpu.sh   (from anywhere)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-results}
bld=${CORRAL_GPU_BUILD:-$root/build-gpu}
jobs=$(nproc)
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
date; nvidia-smi || true; nvcc --version | tail -2 || true

# dev_hook.cmake adds the CUDA targets only where the project's own CMake
# files do not (yet) define them.
cmake -S "$root" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DCORRAL_WERROR=ON \
      -DCMAKE_PROJECT_INCLUDE="$root/tests/gpu/dev_hook.cmake" >"$out/cmake.log" 2>&1 \
    || { echo "cmake failed"; tail -30 "$out/cmake.log"; exit 1; }
grep "CUDA backend" "$out/cmake.log"
cmake --build "$bld" -j "$jobs" --target test_cuda_ops test_cuda_model test_cuda_host \
      bench-cuda corral-runner corral_backend_cuda test_backend_module \
      test_runner_footprint >"$out/build.log" 2>&1 \
    || { echo "build failed"; grep -iE "error|warning" "$out/build.log" | head -40; exit 1; }
echo "build ok"

ctest --test-dir "$bld" -R '^gpu\.' --output-on-failure --timeout 600 \
    | tee "$out/ctest.log"
ctest --test-dir "$bld" -L gpu -N | tail -2
# The module on a host with a driver: loads, and falls back cleanly when
# CUDA sees no device (the tests hide the GPU with CUDA_VISIBLE_DEVICES="").
ctest --test-dir "$bld" -R 'unit\.(test_backend_module|test_runner_footprint|runner_links)$' \
    --output-on-failure | tee -a "$out/ctest.log"

for args in "--shape 8b --type q4_k_m" "--shape 8b --type q8_0" "--shape 1b --type q4_k_m"; do
    echo "== bench-cuda $args"
    timeout 240 "$bld/bin/bench-cuda" $args --pp 512 --tg 128 || echo "bench exit $?"
done
date
