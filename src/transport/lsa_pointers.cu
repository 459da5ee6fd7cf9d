// One-thread setup kernel: asks NCCL's device API for every LSA peer's address of a window.
// The result is plain generic addresses (NCCL maps every peer's allocation into one flat VA range
// of this GPU: lsaFlatBase + peer * stride), usable by any later kernel with ordinary loads,
// stores, atomics, vector or bulk copies. Header-only device API: no -rdc, no device library.
#include "transport/lsa_pointers.h"

#include <nccl.h>
#include <nccl_device.h>

#include "kosmos/cuda_check.h"

namespace kosmos::transport::detail {
namespace {

__global__ void lsa_pointers_kernel(ncclWindow_t window, int lsa_size, void** out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (int peer = 0; peer < lsa_size; ++peer) out[peer] = ncclGetLsaPointer(window, 0, peer);
  out[lsa_size] = ncclGetLocalPointer(window, 0);
}

}  // namespace

Status read_lsa_pointers(void* window, int lsa_size, cudaStream_t stream, std::vector<void*>* out,
                         void** self_alias) {
  KOSMOS_CHECK(window != nullptr && lsa_size > 0, "read_lsa_pointers: no window / empty LSA team");
  void** table = nullptr;
  const size_t table_bytes = sizeof(void*) * (lsa_size + 1);
  KOSMOS_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&table), table_bytes, stream));
  lsa_pointers_kernel<<<1, 1, 0, stream>>>(static_cast<ncclWindow_t>(window), lsa_size, table);
  std::vector<void*> host(lsa_size + 1, nullptr);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaMemcpyAsync(host.data(), table, table_bytes, cudaMemcpyDeviceToHost, stream);
  cudaError_t free_err = cudaFreeAsync(table, stream);
  if (err == cudaSuccess) err = free_err;
  cudaError_t sync_err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) err = sync_err;
  KOSMOS_CUDA_CHECK(err);
  out->assign(host.begin(), host.begin() + lsa_size);
  *self_alias = host[lsa_size];
  return Status::ok();
}

}  // namespace kosmos::transport::detail
