# dev_hook.cmake: builds the CUDA backend and tests/gpu in a build tree whose
# CMake files do not do it yet (services/runner/CMakeLists.txt globbing
# backend/cuda/src, tests/CMakeLists.txt adding gpu). Not used by the
# normal build; pass it as -DCMAKE_PROJECT_INCLUDE=<this file> (what
# tests/gpu/run_on_gpu.sh does). Each part steps aside once the real CMake
# files define the same targets.
# (a deferred call's arguments are expanded when it runs: keep the path)
set(CORRAL_GPU_HOOK_LATE ${CMAKE_CURRENT_LIST_DIR}/dev_hook_late.cmake)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL include ${CORRAL_GPU_HOOK_LATE})
