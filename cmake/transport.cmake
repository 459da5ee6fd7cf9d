# Multi-GPU transport (NCCL 2.28 symmetric memory). Included by the top-level CMakeLists.txt after
# the `kosmos` target exists (kosmos_transport uses its Status helpers).
#
# NOTE: the NCCL device API is header-only (inline __device__ functions): no -rdc, no device link,
# no NCCL device library. Link only libnccl (host) and cudart.
set(_kosmos_root "${CMAKE_CURRENT_LIST_DIR}/..")
if(NOT KOSMOS_NCCL_LIB OR NOT KOSMOS_NCCL_INCLUDE)
  message(FATAL_ERROR "kosmos_transport needs NCCL (KOSMOS_NCCL_LIB / KOSMOS_NCCL_INCLUDE from cmake/deps.cmake)")
endif()
if(NOT EXISTS "${KOSMOS_NCCL_INCLUDE}/nccl_device.h")
  message(FATAL_ERROR "${KOSMOS_NCCL_INCLUDE} has nccl.h but no nccl_device.h: NCCL >= 2.28 is required")
endif()

add_library(kosmos_transport STATIC
  ${_kosmos_root}/src/transport/nccl_transport.cpp
  ${_kosmos_root}/src/transport/unique_id_file.cpp
  ${_kosmos_root}/src/transport/lsa_pointers.cu
  ${_kosmos_root}/src/transport/tp_adapter.cpp
  ${_kosmos_root}/src/transport/peer_transport.cu
)
target_include_directories(kosmos_transport PUBLIC ${_kosmos_root}/include PRIVATE ${_kosmos_root}/src)
target_include_directories(kosmos_transport SYSTEM PUBLIC ${KOSMOS_NCCL_INCLUDE})
target_link_libraries(kosmos_transport PUBLIC kosmos ${KOSMOS_NCCL_LIB} CUDA::cudart)
target_compile_options(kosmos_transport PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_CUDA_FLAGS}>
  $<$<COMPILE_LANGUAGE:CXX>:${KOSMOS_CXX_FLAGS}>)
set_target_properties(kosmos_transport PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)

if(KOSMOS_BUILD_TESTS)
  enable_testing()
  include(GoogleTest)
  # Test kernels shared by the one-GPU and the multi-GPU tests.
  add_library(kosmos_transport_test_kernels STATIC ${_kosmos_root}/tests/gpu/nccl_transport_test_kernels.cu)
  target_include_directories(kosmos_transport_test_kernels PUBLIC ${_kosmos_root}/tests)
  target_link_libraries(kosmos_transport_test_kernels PUBLIC kosmos_transport)
  target_compile_options(kosmos_transport_test_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_CUDA_FLAGS}>)
  set_target_properties(kosmos_transport_test_kernels PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)

  # One GPU, one-rank communicator (label gpu); skips without a GPU.
  add_executable(kosmos_nccl_transport_tests ${_kosmos_root}/tests/gpu/test_nccl_transport.cpp
                 ${_kosmos_root}/tests/gpu/test_nccl_tp.cpp ${_kosmos_root}/tests/gpu/test_peer_transport.cpp)
  target_include_directories(kosmos_nccl_transport_tests PRIVATE ${_kosmos_root}/src ${_kosmos_root}/tests)
  target_link_libraries(kosmos_nccl_transport_tests PRIVATE kosmos_transport_test_kernels GTest::gtest_main)
  target_compile_options(kosmos_nccl_transport_tests PRIVATE ${KOSMOS_CXX_FLAGS})
  gtest_discover_tests(kosmos_nccl_transport_tests PROPERTIES LABELS gpu DISCOVERY_TIMEOUT 60)

  # 2 / 4 / 8 GPUs (label multigpu); skip when fewer GPUs are visible. scripts/run_multigpu.sh runs
  # them in both launch modes.
  add_executable(kosmos_multigpu_tests ${_kosmos_root}/tests/multigpu/test_nccl_multigpu.cpp
                 ${_kosmos_root}/tests/multigpu/test_tp_multigpu.cpp)
  target_include_directories(kosmos_multigpu_tests PRIVATE ${_kosmos_root}/src ${_kosmos_root}/tests)
  target_link_libraries(kosmos_multigpu_tests PRIVATE kosmos_transport_test_kernels GTest::gtest_main)
  target_compile_options(kosmos_multigpu_tests PRIVATE ${KOSMOS_CXX_FLAGS})
  gtest_discover_tests(kosmos_multigpu_tests PROPERTIES LABELS multigpu DISCOVERY_TIMEOUT 60)
endif()
