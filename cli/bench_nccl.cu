// The one-process-per-GPU benchmarks' shared pieces (bench_nccl.h).
#include "bench_nccl.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "bench_timing.h"
#include "kosmos/cuda_check.h"

namespace kosmos::cli {

namespace {

__global__ void compare_bf16_kernel(const uint16_t* x, const uint16_t* ref, uint64_t n, CmpOut* out) {
  unsigned long long mis = 0, nf = 0;
  double num = 0, den = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint16_t a = x[i], b = ref[i];
    mis += a != b;
    nf += (a & 0x7f80u) == 0x7f80u;
    const double da = __uint_as_float(uint32_t(a) << 16), db = __uint_as_float(uint32_t(b) << 16);
    if ((a & 0x7f80u) != 0x7f80u) num += (da - db) * (da - db);
    den += db * db;
  }
  for (int o = 16; o > 0; o >>= 1) {
    mis += __shfl_down_sync(0xffffffffu, mis, o);
    nf += __shfl_down_sync(0xffffffffu, nf, o);
    num += __shfl_down_sync(0xffffffffu, num, o);
    den += __shfl_down_sync(0xffffffffu, den, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&out->mismatches, mis);
    atomicAdd(&out->nonfinite, nf);
    atomicAdd(&out->num, num);
    atomicAdd(&out->den, den);
  }
}

__global__ void compare_words_kernel(const uint32_t* x, const uint32_t* ref, uint64_t n, CmpOut* out) {
  unsigned long long mis = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    mis += x[i] != ref[i];
  for (int o = 16; o > 0; o >>= 1) mis += __shfl_down_sync(0xffffffffu, mis, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(&out->mismatches, mis);
}

// flag[0]: opened up to this value; flag[1]: set when the gate gave up waiting.
__global__ void gate_kernel(volatile uint32_t* flag, uint32_t target) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (flag[0] < target) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 30000000000ull) {  // the host died or blocked: do not hold the GPU forever
      flag[1] = 1;
      break;
    }
  }
}

// One timed repetition on this rank (collective through the barrier). Gated: the gate holds the
// stream until everything is enqueued and is opened whatever happens. Ungated (gate == nullptr): the
// barrier, then the events around the variant.
Status one_rep(const NcclRank& c, Gate* gate, cudaEvent_t a, cudaEvent_t b, const std::function<Status()>& fn, float* ms) {
  struct Opener {
    Gate* g;
    ~Opener() {
      if (g) g->open();
    }
  };
  {
    if (gate) KOSMOS_RETURN_IF_ERROR(gate->arm(c.s0));
    Opener opener{gate};
    KOSMOS_RETURN_IF_ERROR(c.t->barrier(c.s0));
    KOSMOS_CUDA_CHECK(cudaEventRecord(a, c.s0));
    KOSMOS_RETURN_IF_ERROR(fn());
    KOSMOS_CUDA_CHECK(cudaEventRecord(b, c.s0));
  }
  KOSMOS_CUDA_CHECK(cudaEventSynchronize(b));
  KOSMOS_CUDA_CHECK(cudaEventElapsedTime(ms, a, b));
  KOSMOS_CHECK_CODE(!gate || gate->was_opened(), StatusCode::kInternal,
                    "timing gate timed out: the variant blocked the host while the GPU was held");
  return Status::ok();
}

}  // namespace

void run_rank_or_exit(transport::NcclTransport& t, const char* what, const std::function<void()>& body) {
  std::string message;
  try {
    body();
    return;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  t.abort_and_exit(std::string(what) + ": " + message);
}

Status check_nccl_launch_env(const char* what, int* world_out) {
  const std::string hint = std::string(" (") + what +
                           " runs one process per GPU: set RANK, WORLD_SIZE, LOCAL_RANK and, when WORLD_SIZE > 1, "
                           "KOSMOS_NCCL_ID_FILE to a fresh path all ranks share; scripts/run_multigpu_bench.sh does this; for one GPU: "
                           "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0)";
  auto get = [&](const char* name, bool required, int* v) -> Status {
    const char* s = std::getenv(name);
    if (!s || !*s) {
      KOSMOS_CHECK(!required, name, " is not set", hint);
      *v = -1;
      return Status::ok();
    }
    char* end = nullptr;
    const long x = std::strtol(s, &end, 10);
    KOSMOS_CHECK(end && *end == '\0' && x >= 0 && x < 4096, name, "='", s, "' is not a non-negative integer", hint);
    *v = int(x);
    return Status::ok();
  };
  int rank, world, local;
  KOSMOS_RETURN_IF_ERROR(get("RANK", true, &rank));
  KOSMOS_RETURN_IF_ERROR(get("WORLD_SIZE", true, &world));
  KOSMOS_RETURN_IF_ERROR(get("LOCAL_RANK", false, &local));
  KOSMOS_CHECK(world >= 1 && rank < world, "RANK=", rank, " WORLD_SIZE=", world, ": need 0 <= RANK < WORLD_SIZE", hint);
  if (world > 1) {
    const char* f = std::getenv("KOSMOS_NCCL_ID_FILE");
    KOSMOS_CHECK(f && *f, "WORLD_SIZE=", world, " but KOSMOS_NCCL_ID_FILE is not set", hint);
  }
  if (const char* nv = std::getenv("NCCL_NVLS_ENABLE"); nv && std::string(nv) != "0")
    return Status(StatusCode::kInvalidArgument, std::string("NCCL_NVLS_ENABLE=") + nv + ": kosmos never uses NVLink multicast; set it to 0 or unset it");
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  const int dev = local >= 0 ? local : rank;
  KOSMOS_CHECK_CODE(dev < gpus, StatusCode::kUnavailable, "rank ", rank, " wants GPU ", dev, " (LOCAL_RANK) but ", gpus,
                    " GPU(s) are visible");
  *world_out = world;
  return Status::ok();
}

Status compare_bf16(const void* x, const void* ref, size_t elems, CmpOut* d_out, cudaStream_t s, CmpOut* h_out) {
  KOSMOS_CUDA_CHECK(cudaMemsetAsync(d_out, 0, sizeof(CmpOut), s));
  compare_bf16_kernel<<<528, 256, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(ref), elems, d_out);
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(h_out, d_out, sizeof(CmpOut), cudaMemcpyDeviceToHost, s));
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(s));
  return Status::ok();
}

Status count_word_mismatches(const void* x, const void* ref, size_t bytes, CmpOut* d_out, cudaStream_t s,
                             unsigned long long* mismatches) {
  KOSMOS_CHECK(bytes % 4 == 0, "count_word_mismatches: ", bytes, " bytes is not a whole number of 32-bit words");
  CmpOut h{};
  KOSMOS_CUDA_CHECK(cudaMemsetAsync(d_out, 0, sizeof(CmpOut), s));
  compare_words_kernel<<<528, 256, 0, s>>>(static_cast<const uint32_t*>(x), static_cast<const uint32_t*>(ref), bytes / 4, d_out);
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(&h, d_out, sizeof(CmpOut), cudaMemcpyDeviceToHost, s));
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(s));
  *mismatches = h.mismatches;
  return Status::ok();
}

Status Gate::init() {
  KOSMOS_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), 2 * sizeof(uint32_t), cudaHostAllocMapped));
  host_[0] = host_[1] = 0;
  KOSMOS_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_), host_, 0));
  return Status::ok();
}

Status Gate::arm(cudaStream_t s) {
  ++next_;
  gate_kernel<<<1, 1, 0, s>>>(dev_, next_);
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

void Gate::open() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *reinterpret_cast<volatile uint32_t*>(host_) = next_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool Gate::was_opened() const { return reinterpret_cast<volatile uint32_t*>(host_)[1] == 0; }

Gate::~Gate() {
  if (host_) {
    open();
    cudaFreeHost(host_);
  }
}

Status time_nccl_variants(const NcclRank& c, Gate& gate, int reps, const std::vector<std::function<Status()>>& fns,
                          std::vector<double>* medians, const std::vector<bool>& ungated) {
  const size_t n = fns.size();
  cudaEvent_t a, b;
  KOSMOS_CUDA_CHECK(cudaEventCreate(&a));
  KOSMOS_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<std::vector<double>> v(n);
  auto loop = [&]() -> Status {
    // One ungated call of each first: NCCL connects peers lazily on first use (host-side
    // handshakes, maybe synchronous copies), which must not happen while the gate holds the stream.
    for (const auto& fn : fns) {
      KOSMOS_RETURN_IF_ERROR(c.t->barrier(c.s0));
      KOSMOS_RETURN_IF_ERROR(fn());
      KOSMOS_CUDA_CHECK(cudaStreamSynchronize(c.s0));
    }
    for (int i = 0; i < 3 + reps; ++i) {  // 3 warm-ups
      for (size_t jj = 0; jj < n; ++jj) {
        const size_t j = (size_t(i) + jj) % n;
        float ms = 0;
        KOSMOS_RETURN_IF_ERROR(one_rep(c, j < ungated.size() && ungated[j] ? nullptr : &gate, a, b, fns[j], &ms));
        if (i >= 3) v[j].push_back(ms);
      }
    }
    return Status::ok();
  };
  const Status st = loop();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  KOSMOS_RETURN_IF_ERROR(st);
  *medians = medians_of(std::move(v));
  return Status::ok();
}

Status HostDoubles::init(int world, size_t max_per_rank) {
  cap_ = max_per_rank * size_t(world + 1);
  KOSMOS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev_), cap_ * sizeof(double)));
  return Status::ok();
}

HostDoubles::~HostDoubles() {
  if (dev_) cudaFree(dev_);
}

Status HostDoubles::allreduce_max(const NcclRank& c, std::vector<double>* v) {
  KOSMOS_CHECK(v->size() <= cap_, "HostDoubles: ", v->size(), " values, room for ", cap_);
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(dev_, v->data(), v->size() * 8, cudaMemcpyHostToDevice, c.s0));
  KOSMOS_NCCL_BENCH_CHECK(ncclAllReduce(dev_, dev_, v->size(), ncclFloat64, ncclMax, c.comm, c.s0));
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(v->data(), dev_, v->size() * 8, cudaMemcpyDeviceToHost, c.s0));
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(c.s0));
  return Status::ok();
}

Status HostDoubles::allgather(const NcclRank& c, const std::vector<double>& mine, std::vector<double>* all) {
  const size_t n = mine.size();
  KOSMOS_CHECK(n * size_t(c.W + 1) <= cap_, "HostDoubles: ", n, " values per rank, room for ", cap_ / size_t(c.W + 1));
  all->assign(n * size_t(c.W), 0.0);
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(dev_, mine.data(), n * 8, cudaMemcpyHostToDevice, c.s0));
  KOSMOS_NCCL_BENCH_CHECK(ncclAllGather(dev_, dev_ + n, n, ncclFloat64, c.comm, c.s0));
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(all->data(), dev_ + n, n * size_t(c.W) * 8, cudaMemcpyDeviceToHost, c.s0));
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(c.s0));
  return Status::ok();
}

}  // namespace kosmos::cli
