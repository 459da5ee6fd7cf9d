// Device facts for `kosmos info` and benchmark JSON.
#include <cuda_runtime.h>

#include "kosmos/runtime.h"

namespace kosmos::runtime {

DeviceInfo query_device(int device) {
  DeviceInfo info;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    info.error = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();
    return info;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    info.error = "cudaGetDeviceProperties failed";
    return info;
  }
  info.available = true;
  info.name = p.name;
  info.sms = p.multiProcessorCount;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  int v = 0;
  cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device);
  info.clock_mhz = v / 1000;
  cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device);
  info.mem_clock_mhz = v / 1000;
  v = 0;
  cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, device);
  info.mem_bus_bits = v;
  info.memory_bytes = p.totalGlobalMem;
  info.l2_bytes = p.l2CacheSize;
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  info.driver = std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10);
  info.runtime = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
  return info;
}

}  // namespace kosmos::runtime
