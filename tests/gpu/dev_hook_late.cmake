# dev_hook_late.cmake: the deferred half of dev_hook.cmake (runs after every
# directory of the project has been read).
if(CORRAL_HAVE_CUDA AND NOT TARGET corral_cuda)
  # for trees older than the CUDA module (lib/corral/backend-cuda.so): this
  # tree's services/runner/CMakeLists.txt defines corral_cuda itself, so
  # this part steps aside and corral_engine never links CUDA
  file(GLOB RN_CUDA_SOURCES CONFIGURE_DEPENDS
       ${CMAKE_SOURCE_DIR}/services/runner/backend/cuda/src/*.cu)
  add_library(corral_cuda STATIC ${RN_CUDA_SOURCES})
  set_target_properties(corral_cuda PROPERTIES
    CUDA_ARCHITECTURES "80-real;86-real;89-real;90-real;90-virtual"
    CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
  # The project's warning flags are C's; nvcc gets host flags of its own.
  set_property(TARGET corral_cuda PROPERTY COMPILE_OPTIONS
    -Xcompiler=-Wall,-Wextra,-Wshadow,-Wformat=2,-fno-strict-aliasing
    $<$<BOOL:${CORRAL_WERROR}>:-Werror=all-warnings>
    $<$<BOOL:${CORRAL_WERROR}>:-Xcompiler=-Werror>)
  target_link_libraries(corral_cuda PUBLIC corral_lib CUDA::cudart CUDA::cublas)
  target_compile_definitions(corral_engine PUBLIC CORRAL_HAVE_CUDA=1)
  target_link_libraries(corral_engine PUBLIC corral_cuda)
endif()
if(NOT TARGET test_cuda_ops)
  include(${CMAKE_CURRENT_LIST_DIR}/CMakeLists.txt)
endif()
