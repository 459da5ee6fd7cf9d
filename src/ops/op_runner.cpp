#include "ops/op_runner.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/moe_tasks.h"
#include "kernels/reduce_tile.h"
#include "ops/op_kernel.h"

namespace kosmos::ops {

Status use_symmetric_counters(OpRunner& runner, const DistributedContext& dist, bool cpu) {
  const plan::Plan& p = runner.plan();
  std::vector<void*> peers;
  KOSMOS_RETURN_IF_ERROR(dist.alloc_symmetric(sizeof(uint64_t) * std::max<uint32_t>(p.num_counters, 1), &peers));
  KOSMOS_CHECK(peers.size() == p.world, "transport returned ", peers.size(), " counter arrays for world ", p.world);
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free);
  std::vector<uint64_t*> arrays;
  std::vector<std::atomic<uint64_t>*> host_arrays;  // CPU executor: the same memory as atomics
  std::vector<bool> local;
  for (uint32_t r = 0; r < p.world; ++r) {
    arrays.push_back(static_cast<uint64_t*>(peers[r]));
    host_arrays.push_back(reinterpret_cast<std::atomic<uint64_t>*>(peers[r]));
    local.push_back(int(r) == dist.rank);
  }
  return cpu ? runner.cpu()->use_shared_counters(host_arrays, local) : runner.gpu()->use_transport(arrays, local);
}

Status OpRunner::create(const plan::Plan& plan, std::vector<GemmProblemSpec> problems, const RunnerOptions& options,
                        std::unique_ptr<OpRunner>* out) {
  KOSMOS_CHECK(problems.size() <= size_t(kMaxGemmProblems), "op has ", problems.size(), " GEMM problems, at most ",
               kMaxGemmProblems, " fit the kernel parameters");
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto& p = problems[i];
    KOSMOS_CHECK(p.a_buffer < plan.buffers.size() && p.b_buffer < plan.buffers.size() && p.c_buffer < plan.buffers.size(),
                 "GEMM problem ", i, ": operand buffer ids out of range");
    KOSMOS_CHECK(p.rank < plan.world, "GEMM problem ", i, ": rank ", p.rank, " out of range");
  }
  std::unique_ptr<OpRunner> r(new OpRunner());
  r->plan_ = plan;
  r->problems_ = std::move(problems);
  r->options_ = options;
  if (options.executor == ExecutorKind::kGpu) {
    runtime::GpuOptions go;
    go.watchdog_seconds = options.watchdog_seconds;
    go.trace = options.trace;
    go.max_ctas = options.max_ctas;
    bool merged_tails = false;
    for (const GemmProblemSpec& p : r->problems_) merged_tails |= p.desc.merge_tails;
    go.variant = &op_kernel_variant(merged_tails);
    KOSMOS_RETURN_IF_ERROR(runtime::GpuExecutor::create(plan, go, &r->gpu_));
  } else {
    runtime::CpuOptions co;
    co.num_workers = options.cpu_workers;
    co.watchdog_seconds = options.watchdog_seconds;
    co.trace = options.trace;
    KOSMOS_RETURN_IF_ERROR(runtime::CpuExecutor::create(plan, co, &r->cpu_));
    OpRunner* self = r.get();
    r->cpu_->set_host_body(plan::TaskKind::kGemmTile, [self](const plan::Task& t, runtime::HostTaskContext&) {
      const auto a = t.args<kernels::gemm::GemmTileArgs>();
      kernels::gemm::gemm_tile_host(self->resolved_[a.problem], self->params_[a.problem], a);
    });
    r->cpu_->set_host_body(plan::TaskKind::kReduceTile, [self](const plan::Task& t, runtime::HostTaskContext&) {
      kernels::reduce_tile_host(t.args<kernels::ReduceArgs>(), t.rank, self->plan_.world,
                                [self](uint32_t b, uint32_t rank) { return self->cpu_->buffer(b, rank); });
    });
    for (plan::TaskKind k : {plan::TaskKind::kMoeRoute, plan::TaskKind::kMoeOffsets, plan::TaskKind::kMoeDispatch,
                             plan::TaskKind::kMoeCombine, plan::TaskKind::kMoeSwigluBackward})
      r->cpu_->set_host_body(k, [self](const plan::Task& t, runtime::HostTaskContext&) {
        kernels::moe_task_host(
            t, [](const void* c, uint32_t b, uint32_t rank) { return static_cast<const OpRunner*>(c)->cpu_->buffer(b, rank); },
            self);
      });
  }
  *out = std::move(r);
  return Status::ok();
}

Status OpRunner::bind(uint32_t buffer, uint32_t rank, void* ptr) {
  dirty_ = true;
  return gpu_ ? gpu_->bind_buffer(buffer, rank, ptr) : cpu_->bind_buffer(buffer, rank, ptr);
}

Status OpRunner::update_problem(uint32_t problem, const kernels::gemm::GemmDesc& desc) {
  KOSMOS_CHECK(problem < problems_.size(), "update_problem: problem ", problem, " does not exist (", problems_.size(), ")");
  const auto& old = problems_[problem].desc;
  KOSMOS_CHECK(desc.m == old.m && desc.n == old.n && desc.k == old.k && desc.num_groups == old.num_groups,
               "update_problem: shapes must not change (re-plan instead)");
  problems_[problem].desc = desc;
  dirty_ = true;
  return Status::ok();
}

void* OpRunner::buffer(uint32_t buffer, uint32_t rank) const {
  return gpu_ ? gpu_->buffer(buffer, rank) : cpu_->buffer(buffer, rank);
}

Status OpRunner::prepare(cudaStream_t stream) {
  resolved_.clear();
  params_.clear();
  auto ptr = [&](uint32_t b, uint32_t rank, uint64_t off) -> void* {
    void* base = buffer(b, rank);
    return base ? static_cast<char*>(base) + off : nullptr;
  };
  GemmBodyParams body{};
  for (size_t i = 0; i < problems_.size(); ++i) {
    const GemmProblemSpec& s = problems_[i];
    kernels::gemm::GemmDesc d = s.desc;
    d.a = ptr(s.a_buffer, s.rank, s.a_offset);
    d.b = ptr(s.b_buffer, s.rank, s.b_offset);
    d.c = ptr(s.c_buffer, s.c_rank == kNoBuffer ? s.rank : s.c_rank, s.c_offset);
    if (s.row_scale_buffer != kNoBuffer) d.row_scale = static_cast<const float*>(ptr(s.row_scale_buffer, s.rank, s.row_scale_offset));
    if (s.c_aux_buffer != kNoBuffer) d.c_aux = ptr(s.c_aux_buffer, s.rank, s.c_aux_offset);
    d.encode_tma = gpu_ != nullptr;
    if (gpu_) d.num_sms = gpu_->num_sms();
    kernels::gemm::GemmParams p;
    Status st = kernels::gemm::make_gemm_params(d, &p);
    if (!st) return Status(st.code(), "GEMM problem " + std::to_string(i) + " (rank " + std::to_string(s.rank) + "): " + st.message());
    resolved_.push_back(d);
    params_.push_back(p);
    body.problems[i] = p;
    body.rules[i] = s.rule;
  }
  body.num_problems = uint32_t(problems_.size());
  if (gpu_) KOSMOS_RETURN_IF_ERROR(gpu_->set_body_params(&body, gemm_body_bytes(problems_.size()), stream));
  dirty_ = false;
  return Status::ok();
}

Status OpRunner::run(cudaStream_t stream) {
  if (dirty_) KOSMOS_RETURN_IF_ERROR(prepare(stream));
  return gpu_ ? gpu_->run(stream) : cpu_->run();
}

Status OpRunner::finish(cudaStream_t stream) { return gpu_ ? gpu_->finish(stream) : Status::ok(); }

Status OpRunner::read_trace(std::vector<runtime::TraceRecord>* out) const {
  if (gpu_) return gpu_->read_trace(out);
  *out = cpu_->trace();
  return Status::ok();
}

}  // namespace kosmos::ops
