// PeerTransport: several GPUs of one process over plain CUDA peer access (kosmos/transport.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "kosmos/cuda_check.h"
#include "kosmos/transport.h"
#include "runtime/sync.cuh"

namespace kosmos::transport {

namespace {

// One thread: announce this rank's arrival on every rank's counter, then wait for `target`
// arrivals on its own (all ranks' barriers of this generation), at most timeout_ns.
__global__ void peer_barrier_kernel(uint64_t* const* counters, int world, int rank, uint64_t target,
                                    uint64_t timeout_ns) {
  for (int r = 0; r < world; ++r) runtime::red_add_release_sys(counters[r], 1);
  const uint64_t t0 = runtime::globaltimer_ns();
  while (runtime::ld_acquire_sys(counters[rank]) < target) {
    if (runtime::globaltimer_ns() - t0 > timeout_ns) return;  // the op's watchdog reports the missing peer
    __nanosleep(200);
  }
}

// Restores the calling thread's device on scope exit.
struct DeviceGuard {
  int saved = -1;
  DeviceGuard() { cudaGetDevice(&saved); }
  ~DeviceGuard() {
    if (saved >= 0) cudaSetDevice(saved);
  }
};

}  // namespace

struct PeerTransport::Group {
  std::vector<int> devices;
  uint64_t timeout_ns = 0;
  std::mutex mu;
  std::vector<size_t> sizes;                 // per symmetric buffer
  std::vector<std::vector<void*>> buffers;   // [buffer][rank]
  std::vector<uint64_t*> barrier_counters;   // [rank]: one counter on each device
  std::vector<uint64_t**> barrier_tables;    // [rank]: device array of every rank's counter, on that rank's device

  ~Group() {
    DeviceGuard guard;
    for (size_t r = 0; r < devices.size(); ++r) {
      if (cudaSetDevice(devices[r]) != cudaSuccess) continue;
      for (auto& b : buffers) cudaFree(b[r]);
      if (r < barrier_counters.size()) cudaFree(barrier_counters[r]);
      if (r < barrier_tables.size()) cudaFree(barrier_tables[r]);
    }
  }
  // Allocates `bytes` (zeroed) on every device; pointers in *out, [rank].
  Status alloc_all(size_t bytes, std::vector<void*>* out) {
    DeviceGuard guard;
    out->assign(devices.size(), nullptr);
    for (size_t r = 0; r < devices.size(); ++r) {
      KOSMOS_CUDA_CHECK(cudaSetDevice(devices[r]));
      Status s = [&]() -> Status {
        KOSMOS_CUDA_CHECK(cudaMalloc(&(*out)[r], bytes));
        KOSMOS_CUDA_CHECK(cudaMemset((*out)[r], 0, bytes));
        return Status::ok();
      }();
      if (!s) {
        for (size_t q = 0; q <= r; ++q)
          if ((*out)[q] && cudaSetDevice(devices[q]) == cudaSuccess) cudaFree((*out)[q]);
        return s;
      }
    }
    return Status::ok();
  }
};

Status PeerTransport::create(const std::vector<int>& devices, std::vector<std::unique_ptr<PeerTransport>>* out,
                             double barrier_timeout_s) {
  KOSMOS_CHECK(out != nullptr, "PeerTransport::create: out is null");
  KOSMOS_CHECK(!devices.empty(), "PeerTransport::create: no devices given");
  KOSMOS_CHECK(barrier_timeout_s > 0, "PeerTransport::create: barrier_timeout_s = ", barrier_timeout_s, ", expected > 0");
  int count = 0;
  KOSMOS_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::set<int> seen;
  for (int d : devices) {
    KOSMOS_CHECK(d >= 0 && d < count, "PeerTransport::create: device ", d, " does not exist (", count, " visible)");
    KOSMOS_CHECK(seen.insert(d).second, "PeerTransport::create: device ", d,
                 " appears twice: one rank per GPU (virtual ranks on one GPU need no transport)");
  }
  DeviceGuard guard;
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      KOSMOS_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
      KOSMOS_CHECK_CODE(ok, StatusCode::kUnavailable, "PeerTransport::create: device ", a, " cannot access device ", b,
                        " (no peer-to-peer path): this world cannot be served by the peer transport; use NCCL");
    }
  for (int a : devices) {
    KOSMOS_CUDA_CHECK(cudaSetDevice(a));
    for (int b : devices) {
      if (a == b) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
        continue;
      }
      KOSMOS_CUDA_CHECK(e);
    }
  }
  auto g = std::make_shared<Group>();
  g->devices = devices;
  g->timeout_ns = uint64_t(barrier_timeout_s * 1e9);
  std::vector<void*> counters;
  KOSMOS_RETURN_IF_ERROR(g->alloc_all(sizeof(uint64_t), &counters));
  for (void* c : counters) g->barrier_counters.push_back(static_cast<uint64_t*>(c));
  for (size_t r = 0; r < devices.size(); ++r) {
    KOSMOS_CUDA_CHECK(cudaSetDevice(devices[r]));
    uint64_t** table = nullptr;
    KOSMOS_CUDA_CHECK(cudaMalloc(&table, devices.size() * sizeof(uint64_t*)));
    g->barrier_tables.push_back(table);
    KOSMOS_CUDA_CHECK(cudaMemcpy(table, g->barrier_counters.data(), devices.size() * sizeof(uint64_t*),
                                 cudaMemcpyHostToDevice));
  }
  out->clear();
  for (size_t r = 0; r < devices.size(); ++r) out->push_back(std::unique_ptr<PeerTransport>(new PeerTransport(g, int(r))));
  return Status::ok();
}

PeerTransport::~PeerTransport() = default;
int PeerTransport::world() const { return int(group_->devices.size()); }
int PeerTransport::device() const { return group_->devices[size_t(rank_)]; }

Status PeerTransport::alloc_symmetric(size_t bytes, SymmetricBuffer* out) {
  KOSMOS_CHECK(out != nullptr && bytes > 0, "PeerTransport::alloc_symmetric: bytes = ", bytes, ", expected > 0");
  std::lock_guard<std::mutex> lock(group_->mu);
  const size_t k = allocs_;
  if (k == group_->buffers.size()) {
    std::vector<void*> ptrs;
    KOSMOS_RETURN_IF_ERROR(group_->alloc_all(bytes, &ptrs));
    group_->buffers.push_back(std::move(ptrs));
    group_->sizes.push_back(bytes);
  }
  KOSMOS_CHECK(group_->sizes[k] == bytes, "PeerTransport::alloc_symmetric: rank ", rank_, " asks ", bytes,
               " bytes for symmetric buffer ", k, ", another rank asked ", group_->sizes[k],
               ": every rank must allocate the same sizes in the same order");
  ++allocs_;
  out->peers = group_->buffers[k];
  out->local = out->peers[size_t(rank_)];
  out->bytes = bytes;
  out->nccl_window = nullptr;
  return Status::ok();
}

Status PeerTransport::barrier(cudaStream_t stream) {
  DeviceGuard guard;
  KOSMOS_CUDA_CHECK(cudaSetDevice(device()));
  ++generation_;
  const int W = world();
  peer_barrier_kernel<<<1, 1, 0, stream>>>(group_->barrier_tables[size_t(rank_)], W, rank_, uint64_t(W) * generation_,
                                           group_->timeout_ns);
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

}  // namespace kosmos::transport
