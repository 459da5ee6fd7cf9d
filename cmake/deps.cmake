# Dependencies (see README "Dependencies" for why each is here).
find_package(CUDAToolkit 13.0 REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG QUIET)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
find_package(GTest REQUIRED)

# CuTe / CUTLASS headers from the nvidia-cutlass wheel (scripts/setup.sh installs it).
set(KOSMOS_CUTLASS_ROOT "${KOSMOS_DEPS}/cutlass/cutlass_library/source")
if(NOT EXISTS "${KOSMOS_CUTLASS_ROOT}/include/cute/tensor.hpp")
  message(FATAL_ERROR "CUTLASS headers not found under ${KOSMOS_CUTLASS_ROOT}: run scripts/setup.sh")
endif()
add_library(kosmos_cutlass INTERFACE)
target_include_directories(kosmos_cutlass SYSTEM INTERFACE
  "${KOSMOS_CUTLASS_ROOT}/include" "${KOSMOS_CUTLASS_ROOT}/tools/util/include")

# NCCL: the CUDA 13 toolkit keeps libnccl in lib/, not lib64/.
find_library(KOSMOS_NCCL_LIB nccl HINTS "${CUDAToolkit_LIBRARY_ROOT}/lib" "${CUDAToolkit_TARGET_DIR}/lib" /usr/local/cuda/lib)
find_path(KOSMOS_NCCL_INCLUDE nccl.h HINTS "${CUDAToolkit_INCLUDE_DIRS}")
