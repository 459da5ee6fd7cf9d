// GPU executor: uploads a plan, sizes the cooperative grid, launches the persistent kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/basic_tasks.h"
#include "kosmos/cuda_check.h"
#include "kosmos/runtime.h"
#include "runtime/persistent_kernel.cuh"

namespace kosmos::runtime {

namespace {
bool builtin_supports(plan::TaskKind k) { return k < plan::TaskKind::kGemmTile; }

// A launch option overridden by an environment variable when that is set (A/B measurements).
uint32_t env_override(const char* name, uint32_t value) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? uint32_t(std::strtoul(env, nullptr, 10)) : value;
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t count = 0;
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
  Status alloc(size_t n) {
    count = n;
    KOSMOS_CUDA_CHECK(cudaMalloc(&ptr, sizeof(T) * (n ? n : 1)));
    KOSMOS_CUDA_CHECK(cudaMemset(ptr, 0, sizeof(T) * (n ? n : 1)));
    return Status::ok();
  }
  Status upload(const std::vector<T>& v) {
    KOSMOS_RETURN_IF_ERROR(alloc(v.size()));
    if (!v.empty()) KOSMOS_CUDA_CHECK(cudaMemcpy(ptr, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
    return Status::ok();
  }
};
}  // namespace

const KernelVariant& builtin_kernel_variant() {
  static const KernelVariant v{"builtin", reinterpret_cast<const void*>(&persistent_kernel<BuiltinBody>),
                               BuiltinBody::kThreads, BuiltinBody::kSmemBytes, &builtin_supports};
  return v;
}

struct GpuExecutor::Impl {
  KernelVariant variant{};
  KernelParams params{};
  size_t body_bytes = 0;  // of params.body, as last set by set_body_params
  DeviceArray<plan::Task> tasks;
  DeviceArray<plan::Wait> waits;
  DeviceArray<plan::Signal> signals;
  DeviceArray<uint64_t> counters, totals;
  DeviceArray<uint64_t*> counter_table;
  std::vector<uint64_t*> host_counter_table;
  DeviceArray<RunState> state;
  DeviceArray<ErrorRecord> error;
  DeviceArray<void*> buffer_table;
  DeviceArray<TraceRecord> trace;
  DeviceArray<AuditRecord> audit;
  std::vector<void*> host_buffer_table;
  std::vector<void*> owned;  // executor-allocated buffers
  std::vector<bool> owned_counter_ranks;  // ranks whose counter arrays this process zeroes on recovery
  std::string failed_across_processes;    // set by finish(): a run with peers in other processes failed
  uint32_t* host_abort = nullptr;  // mapped pinned
  ~Impl() {
    for (void* p : owned) cudaFree(p);
    if (host_abort) cudaFreeHost(host_abort);
  }
};

Status GpuExecutor::create(const plan::Plan& plan, const GpuOptions& options, std::unique_ptr<GpuExecutor>* out) {
  KOSMOS_CHECK(out != nullptr, "GpuExecutor::create: out is null");
  KOSMOS_CHECK(options.watchdog_seconds > 0, "GpuExecutor: watchdog_seconds must be > 0, got ", options.watchdog_seconds);
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    cudaGetLastError();
    return Status(StatusCode::kUnavailable, "GpuExecutor: no CUDA device is visible");
  }
  int device = 0;
  KOSMOS_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  KOSMOS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  KOSMOS_CHECK_CODE(prop.major == 9 && prop.minor == 0, StatusCode::kUnavailable, "GpuExecutor: kosmos kernels are built for sm_90a (Hopper); device ",
                    device, " '", prop.name, "' is sm_", prop.major, prop.minor);
  KOSMOS_CHECK_CODE(prop.cooperativeLaunch, StatusCode::kUnavailable, "GpuExecutor: device does not support cooperative launch");

  const KernelVariant& variant = options.variant ? *options.variant : builtin_kernel_variant();
  for (const plan::Task& t : plan.tasks) {
    KOSMOS_CHECK(variant.supports(t.kind), "GpuExecutor: kernel variant '", variant.name, "' cannot run task ", t.id,
                 " of kind ", plan::to_string(t.kind));
    KOSMOS_RETURN_IF_ERROR(kernels::validate_builtin_task(plan, t));
  }
  KOSMOS_CHECK(plan.tasks.size() < kNoSlot, "GpuExecutor: too many tasks");

  std::unique_ptr<GpuExecutor> ex(new GpuExecutor());
  ex->plan_ = plan;
  ex->impl_ = std::make_unique<Impl>();
  Impl& im = *ex->impl_;
  im.variant = variant;

  // Grid: every SM x the occupancy the variant allows. Cooperative launch refuses grids that
  // cannot be co-resident, so this is checked by the driver as well as computed here.
  if (variant.dynamic_smem_bytes > 48 * 1024) {
    KOSMOS_CUDA_CHECK(cudaFuncSetAttribute(variant.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(variant.dynamic_smem_bytes)));
    if (variant.kernel_small_params)
      KOSMOS_CUDA_CHECK(cudaFuncSetAttribute(variant.kernel_small_params, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(variant.dynamic_smem_bytes)));
  }
  int per_sm = 0;
  KOSMOS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, variant.kernel, variant.threads,
                                                                  variant.dynamic_smem_bytes));
  if (variant.kernel_small_params) {  // one grid for both launches: the smaller occupancy of the two
    int per_sm_small = 0;
    KOSMOS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_small, variant.kernel_small_params,
                                                                    variant.threads, variant.dynamic_smem_bytes));
    per_sm = std::min(per_sm, per_sm_small);
  }
  KOSMOS_CHECK_CODE(per_sm >= 1, StatusCode::kUnavailable, "GpuExecutor: kernel '", variant.name,
                    "' cannot be resident (threads ", variant.threads, ", smem ", variant.dynamic_smem_bytes, ")");
  ex->num_sms_ = prop.multiProcessorCount;
  ex->ctas_per_sm_ = per_sm;
  ex->grid_ = prop.multiProcessorCount * per_sm;
  if (options.max_ctas > 0) ex->grid_ = std::min(ex->grid_, options.max_ctas);

  KOSMOS_RETURN_IF_ERROR(im.tasks.upload(plan.tasks));
  KOSMOS_RETURN_IF_ERROR(im.waits.upload(plan.waits));
  KOSMOS_RETURN_IF_ERROR(im.signals.upload(plan.signals));
  KOSMOS_RETURN_IF_ERROR(im.counters.alloc(size_t(plan.world) * plan.num_counters));
  KOSMOS_RETURN_IF_ERROR(im.totals.upload(plan.counter_totals));
  for (uint32_t r = 0; r < plan.world; ++r) im.host_counter_table.push_back(im.counters.ptr + size_t(r) * plan.num_counters);
  KOSMOS_RETURN_IF_ERROR(im.counter_table.upload(im.host_counter_table));
  im.owned_counter_ranks.assign(plan.world, true);
  KOSMOS_RETURN_IF_ERROR(im.state.alloc(1));
  KOSMOS_RETURN_IF_ERROR(im.error.alloc(1));
  if (options.trace) KOSMOS_RETURN_IF_ERROR(im.trace.alloc(plan.tasks.size()));
  if (options.audit) KOSMOS_RETURN_IF_ERROR(im.audit.alloc(plan.tasks.size()));
  KOSMOS_CUDA_CHECK(cudaHostAlloc(&im.host_abort, sizeof(uint32_t), cudaHostAllocMapped));
  *im.host_abort = 0;
  uint32_t* abort_dev = nullptr;
  KOSMOS_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&abort_dev), im.host_abort, 0));

  im.host_buffer_table.assign(plan.buffers.size() * plan.world, nullptr);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (plan.buffers[b].external) continue;
    for (uint32_t r = 0; r < plan.world; ++r) {
      void* p = nullptr;
      KOSMOS_CUDA_CHECK(cudaMalloc(&p, std::max<uint64_t>(plan.buffers[b].bytes_per_rank, 16)));
      im.owned.push_back(p);
      KOSMOS_CUDA_CHECK(cudaMemset(p, 0, plan.buffers[b].bytes_per_rank));
      im.host_buffer_table[b * plan.world + r] = p;
    }
  }
  KOSMOS_RETURN_IF_ERROR(im.buffer_table.upload(im.host_buffer_table));

  KernelParams& p = im.params;
  p.tasks = im.tasks.ptr;
  p.waits = im.waits.ptr;
  p.signals = im.signals.ptr;
  p.counters = im.counter_table.ptr;
  p.counters_flat = im.counters.ptr;
  p.totals = im.totals.ptr;
  p.state = im.state.ptr;
  p.error = im.error.ptr;
  p.host_abort = abort_dev;
  p.buffers = im.buffer_table.ptr;
  p.trace = options.trace ? im.trace.ptr : nullptr;
  p.audit = options.audit ? im.audit.ptr : nullptr;
  p.num_tasks = uint32_t(plan.tasks.size());
  p.world = plan.world;
  p.num_counters = plan.num_counters;
  p.num_buffers = uint32_t(plan.buffers.size());
  p.watchdog_ns = uint64_t(options.watchdog_seconds * 1e9);
  p.sys_scope = 0;  // virtual ranks on one GPU; the multi-GPU transport sets .sys
  p.claim_ahead = env_override("KOSMOS_CLAIM_AHEAD", options.claim_ahead);
  KOSMOS_CHECK(p.claim_ahead <= kClaimAheadAlways, "GpuOptions::claim_ahead must be 0, 1 or 2 (got ", p.claim_ahead,
               "; KOSMOS_CLAIM_AHEAD overrides it)");
  const uint32_t carry = env_override("KOSMOS_RING_CARRY", options.ring_carry);
  KOSMOS_CHECK(carry <= 2, "GpuOptions::ring_carry must be 0, 1 or 2 (got ", carry, "; KOSMOS_RING_CARRY overrides it)");
  // 2: every launch; 1: only launches of GEMM tiles alone (the default while the claim ran on the
  // producer thread: a fused layer's GEMM tiles, which wait on and feed other kinds of tasks, then
  // ran 3-5 % slower with the carry; twenty-seventh to twenty-ninth sessions).
  bool gemm_only = true, no_waits = true;
  for (const plan::Task& t : plan.tasks) {
    gemm_only &= t.kind == plan::TaskKind::kGemmTile;
    no_waits &= t.num_waits == 0;
  }
  p.ring_carry = carry == 2 || (carry == 1 && gemm_only) ? 1u : 0u;
  // Measurement switches (kernel_params.h), never set by the library. kDiagNoWriteWait applies only
  // to launches without waits (no task of the launch reads another's outputs), where it is safe.
  const uint32_t diag = env_override("KOSMOS_DIAG", 0u);
  KOSMOS_CHECK(diag <= kDiagNoWriteWait, "KOSMOS_DIAG must be 0 or 1 (got ", diag, ")");
  p.diag = no_waits ? diag : 0u;
  p.publish = env_override("KOSMOS_PUBLISH", options.publish);
  KOSMOS_CHECK(p.publish <= kPublishWarp1Relaxed, "GpuOptions::publish must be 0, 1 or 2 (got ", p.publish,
               "; KOSMOS_PUBLISH overrides it)");
  *out = std::move(ex);
  return Status::ok();
}

GpuExecutor::~GpuExecutor() = default;

Status GpuExecutor::bind_buffer(uint32_t buffer, uint32_t rank, void* device_ptr) {
  KOSMOS_CHECK(buffer < plan_.buffers.size(), "bind_buffer: buffer ", buffer, " does not exist");
  KOSMOS_CHECK(plan_.buffers[buffer].external, "bind_buffer: buffer '", plan_.buffers[buffer].name,
               "' is allocated by the executor, not external");
  KOSMOS_CHECK(rank < plan_.world, "bind_buffer: rank ", rank, " out of range for world ", plan_.world);
  KOSMOS_CHECK(device_ptr != nullptr, "bind_buffer: null pointer for buffer '", plan_.buffers[buffer].name, "' rank ", rank);
  cudaPointerAttributes attr{};
  // NOTE: LSA peer pointers (NCCL's flat mapping of a peer's window) need not report as device
  // memory here; host (pageable) pointers for this process's own ranks are a clear mistake.
  if (cudaPointerGetAttributes(&attr, device_ptr) == cudaSuccess)
    KOSMOS_CHECK(attr.type != cudaMemoryTypeHost, "bind_buffer: buffer '", plan_.buffers[buffer].name, "' rank ", rank,
                 ": pointer ", device_ptr, " is host memory; the GPU executor needs device memory");
  cudaGetLastError();
  impl_->host_buffer_table[size_t(buffer) * plan_.world + rank] = device_ptr;
  KOSMOS_CUDA_CHECK(cudaMemcpy(impl_->buffer_table.ptr, impl_->host_buffer_table.data(),
                               sizeof(void*) * impl_->host_buffer_table.size(), cudaMemcpyHostToDevice));
  return Status::ok();
}

void* GpuExecutor::buffer(uint32_t buffer, uint32_t rank) const {
  return impl_->host_buffer_table.at(size_t(buffer) * plan_.world + rank);
}

Status GpuExecutor::set_body_params(const void* data, size_t bytes, cudaStream_t) {
  KOSMOS_CHECK(bytes <= kBodyParamBytes, "set_body_params: ", bytes, " bytes exceed the ", kBodyParamBytes, " available");
  std::memcpy(impl_->params.body, data, bytes);  // by value into the next launches' parameters
  impl_->body_bytes = bytes;
  return Status::ok();
}

Status GpuExecutor::run(cudaStream_t stream) {
  for (size_t i = 0; i < impl_->host_buffer_table.size(); ++i)
    KOSMOS_CHECK(impl_->host_buffer_table[i] != nullptr, "run: external buffer '", plan_.buffers[i / plan_.world].name,
                 "' of rank ", i % plan_.world, " is not bound");
  if (!impl_->failed_across_processes.empty()) return refused_after_failure_across_processes(impl_->failed_across_processes);
  if (plan_.tasks.empty()) return Status::ok();
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid_);
  cfg.blockDim = dim3(impl_->variant.threads);
  cfg.dynamicSmemBytes = impl_->variant.dynamic_smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // The small-parameter kernel reads the first sizeof(KernelParamsSmall) bytes of the same block.
  const bool small = impl_->variant.kernel_small_params && impl_->body_bytes <= kSmallBodyParamBytes;
  void* args[] = {&impl_->params};
  KOSMOS_CUDA_CHECK(cudaLaunchKernelExC(&cfg, small ? impl_->variant.kernel_small_params : impl_->variant.kernel, args));
  return Status::ok();
}

Status GpuExecutor::finish(cudaStream_t stream) {
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(stream));
  ErrorRecord rec{};
  KOSMOS_CUDA_CHECK(cudaMemcpy(&rec, impl_->error.ptr, sizeof(rec), cudaMemcpyDeviceToHost));
  if (rec.kind == uint32_t(ErrorKind::kNone)) return Status::ok();
  // Recover: counters and the epoch restart from zero; the next run starts clean. Only this
  // process's counters can be reset: when peers run in other processes (some counter arrays are
  // not ours), they may still be running this run, or signal into counters zeroed here, so this
  // executor refuses further runs instead (run() says so) -- the layer is re-created on every rank.
  Impl& im = *impl_;
  const bool across_processes =
      std::find(im.owned_counter_ranks.begin(), im.owned_counter_ranks.end(), false) != im.owned_counter_ranks.end();
  for (uint32_t r = 0; r < plan_.world; ++r)  // only this process's counter arrays (local ranks)
    if (im.owned_counter_ranks[r])
      KOSMOS_CUDA_CHECK(cudaMemset(im.host_counter_table[r], 0, sizeof(uint64_t) * std::max<uint32_t>(plan_.num_counters, 1)));
  KOSMOS_CUDA_CHECK(cudaMemset(im.state.ptr, 0, sizeof(RunState)));
  KOSMOS_CUDA_CHECK(cudaMemset(im.error.ptr, 0, sizeof(ErrorRecord)));
  KOSMOS_CUDA_CHECK(cudaDeviceSynchronize());
  *im.host_abort = 0;
  const StatusCode code = rec.kind == uint32_t(ErrorKind::kHostAbort) ? StatusCode::kAborted : StatusCode::kTimeout;
  const std::string what = rec.task_id == kNoSlot ? std::string("run aborted by the host between tasks") : describe(rec, plan_);
  if (across_processes) im.failed_across_processes = what;
  return Status(code, what + (across_processes ? kFailedAcrossProcessesNote : ""));
}

Status GpuExecutor::use_transport(const std::vector<uint64_t*>& counter_arrays, const std::vector<bool>& local_ranks) {
  KOSMOS_CHECK(counter_arrays.size() == plan_.world && local_ranks.size() == plan_.world, "use_transport: need one counter array per rank (",
               plan_.world, "), got ", counter_arrays.size());
  for (uint32_t r = 0; r < plan_.world; ++r) {
    KOSMOS_CHECK(counter_arrays[r] != nullptr, "use_transport: counter array of rank ", r, " is null");
    if (local_ranks[r]) KOSMOS_CUDA_CHECK(cudaMemset(counter_arrays[r], 0, sizeof(uint64_t) * std::max<uint32_t>(plan_.num_counters, 1)));
  }
  impl_->host_counter_table = counter_arrays;
  impl_->owned_counter_ranks = local_ranks;
  KOSMOS_CUDA_CHECK(cudaMemcpy(impl_->counter_table.ptr, counter_arrays.data(), sizeof(uint64_t*) * plan_.world,
                               cudaMemcpyHostToDevice));
  // .sys fences and atomics where the counters and buffers span GPUs. A one-rank plan over the
  // transport keeps every counter and buffer on this GPU, where .gpu is enough (fourteenth
  // session, one rank over NCCL: the fused MoE forward's median gap between two GEMM tasks was 3.14
  // us under .sys, 2.50 under .gpu).
  impl_->params.sys_scope = plan_.world > 1 ? 1 : 0;
  impl_->params.counters_flat = nullptr;  // per-rank arrays in symmetric memory: use the table
  return Status::ok();
}

Status GpuExecutor::abort() {
  *reinterpret_cast<volatile uint32_t*>(impl_->host_abort) = 1;
  return Status::ok();
}

Status GpuExecutor::clear_abort() {
  *reinterpret_cast<volatile uint32_t*>(impl_->host_abort) = 0;
  return Status::ok();
}

Status GpuExecutor::read_trace(std::vector<TraceRecord>* out) const {
  KOSMOS_CHECK(impl_->params.trace != nullptr, "read_trace: executor was created without trace");
  out->resize(plan_.tasks.size());
  KOSMOS_CUDA_CHECK(cudaMemcpy(out->data(), impl_->trace.ptr, sizeof(TraceRecord) * out->size(), cudaMemcpyDeviceToHost));
  return Status::ok();
}

Status GpuExecutor::read_audit(std::vector<AuditRecord>* out) const {
  KOSMOS_CHECK(impl_->params.audit != nullptr, "read_audit: executor was created without audit");
  out->resize(plan_.tasks.size());
  KOSMOS_CUDA_CHECK(cudaMemcpy(out->data(), impl_->audit.ptr, sizeof(AuditRecord) * out->size(), cudaMemcpyDeviceToHost));
  return Status::ok();
}

Status GpuExecutor::read_epoch(uint64_t* out) const {
  RunState s{};
  KOSMOS_CUDA_CHECK(cudaMemcpy(&s, impl_->state.ptr, sizeof(s), cudaMemcpyDeviceToHost));
  *out = s.epoch;
  return Status::ok();
}

Status GpuExecutor::read_counter(uint32_t rank, uint32_t counter, uint64_t* out) const {
  KOSMOS_CHECK(rank < plan_.world && counter < plan_.num_counters, "read_counter: (", rank, ", ", counter, ") out of range");
  KOSMOS_CUDA_CHECK(cudaMemcpy(out, impl_->host_counter_table[rank] + counter, 8,
                               cudaMemcpyDeviceToHost));
  return Status::ok();
}

}  // namespace kosmos::runtime
