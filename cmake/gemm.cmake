# GEMM engine (src/kernels/gemm): host library, GPU test, benchmark.
# Included from the top-level CMakeLists.txt after kosmos_cutlass, GTest and CUDA::* exist.
# NOTE: nothing here links CUDA::cuda_driver; the TMA encoder comes through
# cudaGetDriverEntryPointByVersion.

add_library(kosmos_gemm STATIC src/kernels/gemm/gemm_host.cpp)
target_include_directories(kosmos_gemm PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
# gemm_host.cpp includes <cuda.h> for CUtensorMap and the CCCL headers CUTLASS needs.
target_include_directories(kosmos_gemm SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_INCLUDE_DIRS}/cccl)
target_link_libraries(kosmos_gemm PUBLIC kosmos_cutlass CUDA::cudart)
target_compile_features(kosmos_gemm PUBLIC cxx_std_20)
# status.cpp (kosmos::Status helpers) lives in the core library; link it where it is built.
if(TARGET kosmos)
  target_link_libraries(kosmos_gemm PUBLIC kosmos)
else()
  target_sources(kosmos_gemm PRIVATE src/status.cpp)
endif()

set(KOSMOS_GEMM_CUDA_FLAGS ${KOSMOS_CUDA_FLAGS} --expt-relaxed-constexpr -lineinfo)

add_executable(gemm_engine_test tests/gpu/gemm_engine_test.cu)
target_include_directories(gemm_engine_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/gpu)
target_compile_options(gemm_engine_test PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_GEMM_CUDA_FLAGS}>)
target_link_libraries(gemm_engine_test PRIVATE kosmos_gemm GTest::gtest_main)
set_target_properties(gemm_engine_test PROPERTIES CUDA_ARCHITECTURES 90a)
add_test(NAME gemm_engine_test COMMAND gemm_engine_test)
set_tests_properties(gemm_engine_test PROPERTIES LABELS "gpu" TIMEOUT 300)

# The CLI's alternating timer (cli/bench_timing.cpp), so both benchmarks time alike.
add_executable(gemm_engine_bench benchmarks/gemm_engine_bench.cu cli/bench_timing.cpp)
target_include_directories(gemm_engine_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests/gpu ${PROJECT_SOURCE_DIR}/cli)
target_compile_options(gemm_engine_bench PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_GEMM_CUDA_FLAGS}>)
target_link_libraries(gemm_engine_bench PRIVATE kosmos kosmos_gemm CUDA::cublas CUDA::cublasLt)
set_target_properties(gemm_engine_bench PROPERTIES CUDA_ARCHITECTURES 90a)

# Diagnostic: can the persistent launch be cooperative and clustered, and how many SMs do 2-CTA
# clusters keep at the op kernel's shape? (docs/design/runtime.md, "Paired claims")
add_executable(cluster_probe benchmarks/cluster_probe.cu)
target_compile_options(cluster_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_GEMM_CUDA_FLAGS}>)
target_link_libraries(cluster_probe PRIVATE kosmos_gemm)
set_target_properties(cluster_probe PROPERTIES CUDA_ARCHITECTURES 90a)

# Diagnostic: could GEMM1 gather its A rows from x (one-row TMA boxes, or cp.async) instead of a dispatch copy?
# (docs/design/moe.md, "Where the time goes"; layout check and load throughput, benchmarks/gather_probe.cu)
add_executable(gather_probe benchmarks/gather_probe.cu)
target_compile_options(gather_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_GEMM_CUDA_FLAGS}>)
target_link_libraries(gather_probe PRIVATE kosmos_gemm)
set_target_properties(gather_probe PROPERTIES CUDA_ARCHITECTURES 90a)

# Diagnostic: per-tile phase marks of the engine (gemm_tile built with KOSMOS_GEMM_PROBE).
# The runtime's op kernel is built a second time with the marks (an object library linked ahead
# of libkosmos, so its op_kernel_variant() is the one the product path uses in this binary).
add_library(kosmos_op_kernel_probe OBJECT src/ops/op_kernel.cu)
target_compile_definitions(kosmos_op_kernel_probe PRIVATE KOSMOS_GEMM_PROBE=1)
target_include_directories(kosmos_op_kernel_probe PRIVATE $<TARGET_PROPERTY:kosmos,INCLUDE_DIRECTORIES>)
target_compile_options(kosmos_op_kernel_probe PRIVATE $<TARGET_PROPERTY:kosmos,COMPILE_OPTIONS>)
set_target_properties(kosmos_op_kernel_probe PROPERTIES CUDA_ARCHITECTURES 90a)
# One probe binary: benchmarks/gemm_probe.cu against the probe build of the op kernel, with an
# optional diagnostic define for its standalone engine.
function(kosmos_gemm_probe name)
  add_executable(${name} benchmarks/gemm_probe.cu $<TARGET_OBJECTS:kosmos_op_kernel_probe>)
  if(ARGC GREATER 1)
    target_compile_definitions(${name} PRIVATE ${ARGV1}=1)
  endif()
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/gpu)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${KOSMOS_GEMM_CUDA_FLAGS}>)
  target_link_libraries(${name} PRIVATE kosmos kosmos_gemm CUDA::cublas)
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES 90a EXCLUDE_FROM_ALL ON)
endfunction()
kosmos_gemm_probe(gemm_probe)
# The standalone engine's 16-byte epilogue without its global stores (KOSMOS_GEMM_PROBE_NO_STORE;
# run with KOSMOS_GEMM_TMA_STORE=0): how much of the epilogue the stores themselves take.
kosmos_gemm_probe(gemm_probe_nostore KOSMOS_GEMM_PROBE_NO_STORE)
# The TMA-store epilogue without its staging waits (KOSMOS_GEMM_PROBE_NO_EPI_WAIT; C is wrong): how
# much of the epilogue is waiting for the TMA to read the staging.
kosmos_gemm_probe(gemm_probe_nowait KOSMOS_GEMM_PROBE_NO_EPI_WAIT)
# Built on request only (`cmake --build build --target gemm_probe`): diagnostics, not deliverables.
set_target_properties(kosmos_op_kernel_probe PROPERTIES EXCLUDE_FROM_ALL ON)
