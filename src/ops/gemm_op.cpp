// kosmos::Gemm: the one-op plan. Buffers A, B, C (and row_scale) are external; tasks are runs of
// tiles in the claim order ops::plan_gemm_runs picks for L2 reuse (gemm_raster.h).
#include "kosmos/gemm.h"

#include <cuda_runtime_api.h>

#include "ops/gemm_args.h"
#include "ops/gemm_raster.h"
#include "ops/op_runner.h"

namespace kosmos {

namespace {
enum Buf : uint32_t { kA = 0, kB = 1, kC = 2, kScale = 3 };

int device_sms() {
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaGetLastError();
  return sms;
}
}  // namespace

struct Gemm::Impl {
  std::unique_ptr<ops::OpRunner> runner;
  GemmArguments args;
  kernels::gemm::GemmParams shape;
  uint32_t run = 1;
  std::string raster;
  int num_sms = 132;
  // Planned with merged tails (GemmOptions::merge_tails, where the problem admits them).
  bool merges_tails() const { return (shape.layout & kernels::gemm::kGemmMergeTails) != 0; }
};

Gemm::~Gemm() = default;

Status Gemm::plan(const GemmArguments& args, const GemmOptions& options, std::unique_ptr<Gemm>* out) {
  KOSMOS_CHECK(out != nullptr, "Gemm::plan: out is null");
  auto impl = std::make_unique<Impl>();
  impl->args = args;
  kernels::gemm::GemmDesc d = ops::to_gemm_desc(args);
  d.encode_tma = false;
  d.num_sms = options.cpu ? 132 : device_sms();
  KOSMOS_RETURN_IF_ERROR(kernels::gemm::make_gemm_params(d, &impl->shape));  // validates everything
  // Merged tails where make_gemm_params admits them for the tile shape just chosen (it names what
  // merging needs; a problem it rejects plans without). KOSMOS_GEMM_MERGE_TAILS=0 leaves the
  // layout flag off: then the plan does not merge either.
  const bool want_merge = options.merge_tails == GemmMergeTails::kOn ||
                          (options.merge_tails == GemmMergeTails::kAuto && args.k <= kGemmMergeTailsMaxK);
  if (want_merge) {
    kernels::gemm::GemmDesc m = d;
    m.tile_shape = impl->shape.tile_shape;
    m.merge_tails = true;
    kernels::gemm::GemmParams mp;
    if (kernels::gemm::make_gemm_params(m, &mp).is_ok()) {
      d = m;
      impl->shape = mp;
    }
  }
  const auto& p = impl->shape;
  const int ctas = d.num_sms;  // one op CTA per SM (228 KB of shared memory each)
  impl->num_sms = d.num_sms;
  const GemmClaimOrder& co = options.claim_order;
  KOSMOS_CHECK(co.run <= 16, "GemmOptions::claim_order.run = ", co.run, ": expected 0 (the planner's) or 1..16");
  KOSMOS_CHECK(co.run == 0 || co.group >= 1, "GemmOptions::claim_order.group = ", co.group, ": expected >= 1");
  ops::RasterChoice choice;
  const ops::RasterProblem rp = ops::raster_problem(p, 0, p.num_m_tiles, ctas);
  // The planner's order, or one group's slots per claim (ops::expert_claim_group, tails separate only),
  // or the caller's.
  const int expert_group = co.run == 0 && !impl->merges_tails() ? ops::expert_claim_group(rp) : 0;
  const std::vector<ops::GemmRun> runs = co.run != 0       ? ops::make_gemm_runs(rp, co.along_n, co.run, co.group, &choice)
                                         : expert_group > 0 ? ops::make_gemm_runs(rp, false, 1, expert_group, &choice)
                                                            : ops::plan_gemm_runs(rp, &choice);
  impl->run = choice.run;
  impl->raster = choice.describe() + (co.run != 0 ? " (set)" : expert_group > 0 ? " (one group's slots per claim)" : "") +
                 (impl->merges_tails() ? "; tails of <= 32 rows merged" : "");

  plan::PlanBuilder b(1, "gemm");
  const uint64_t a_bytes = 1, b_bytes = 1, c_bytes = 1;  // external: sizes are the caller's
  b.add_buffer("A", a_bytes, true);
  b.add_buffer("B", b_bytes, true);
  b.add_buffer("C", c_bytes, true);
  if (args.row_scale) b.add_buffer("row_scale", 1, true);
  for (const ops::GemmRun& r : runs) b.add_task(plan::TaskKind::kGemmTile, 0, ops::tile_args(0, r));
  plan::Plan pl;
  KOSMOS_RETURN_IF_ERROR(b.build(&pl));

  ops::GemmProblemSpec spec;
  spec.desc = d;
  spec.desc.a = spec.desc.b = nullptr;
  spec.desc.c = nullptr;
  spec.a_buffer = kA;
  spec.b_buffer = kB;
  spec.c_buffer = kC;
  if (args.row_scale) spec.row_scale_buffer = kScale;
  ops::RunnerOptions ro;
  ro.executor = options.cpu ? ops::ExecutorKind::kCpu : ops::ExecutorKind::kGpu;
  ro.watchdog_seconds = options.watchdog_seconds;
  ro.trace = options.trace;
  KOSMOS_RETURN_IF_ERROR(ops::OpRunner::create(pl, {spec}, ro, &impl->runner));
  std::unique_ptr<Gemm> g(new Gemm());
  g->impl_ = std::move(impl);
  KOSMOS_RETURN_IF_ERROR(g->update(args));
  *out = std::move(g);
  return Status::ok();
}

Status Gemm::update(const GemmArguments& args) {
  const GemmArguments& o = impl_->args;
  KOSMOS_CHECK(args.m == o.m && args.n == o.n && args.k == o.k && args.num_groups == o.num_groups &&
                   args.epilogue == o.epilogue && args.a_col_major == o.a_col_major && args.b_transposed == o.b_transposed,
               "Gemm::update: shapes, layouts and epilogue must match the planned ones (re-plan instead)");
  KOSMOS_CHECK(args.a && args.b && args.c, "Gemm::update: a, b and c must be non-null");
  KOSMOS_CHECK(!(args.epilogue & kEpilogueRowScale) || args.row_scale, "Gemm::update: row_scale is null");
  KOSMOS_CHECK(args.num_groups == 0 || (args.group_m && args.group_offset), "Gemm::update: grouped GEMM needs group_m and group_offset");
  impl_->args = args;
  ops::OpRunner& r = *impl_->runner;
  if (args.num_groups > 0) {  // device arrays of group sizes / offsets are descriptor fields, not buffers
    kernels::gemm::GemmDesc d = ops::to_gemm_desc(args);
    d.a = d.b = nullptr;
    d.c = nullptr;
    d.num_sms = impl_->num_sms;
    d.tile_shape = impl_->shape.tile_shape;
    d.merge_tails = impl_->merges_tails();
    KOSMOS_RETURN_IF_ERROR(r.update_problem(0, d));
  }
  KOSMOS_RETURN_IF_ERROR(r.bind(kA, 0, const_cast<void*>(args.a)));
  KOSMOS_RETURN_IF_ERROR(r.bind(kB, 0, const_cast<void*>(args.b)));
  KOSMOS_RETURN_IF_ERROR(r.bind(kC, 0, args.c));
  if (args.row_scale) KOSMOS_RETURN_IF_ERROR(r.bind(kScale, 0, const_cast<float*>(args.row_scale)));
  return Status::ok();
}

Status Gemm::run(cudaStream_t stream) { return impl_->runner->run(stream); }
Status Gemm::finish(cudaStream_t stream) { return impl_->runner->finish(stream); }
size_t Gemm::num_tasks() const { return impl_->runner->plan().tasks.size(); }
int Gemm::tile_n() const { return kernels::gemm::gemm_block_n(impl_->shape.tile_shape); }
uint32_t Gemm::run_length() const { return impl_->run; }
const std::string& Gemm::raster() const { return impl_->raster; }

Status gemm(const GemmArguments& args, cudaStream_t stream) {
  std::unique_ptr<Gemm> g;
  KOSMOS_RETURN_IF_ERROR(Gemm::plan(args, GemmOptions{}, &g));
  KOSMOS_RETURN_IF_ERROR(g->run(stream));
  return g->finish(stream);
}

}  // namespace kosmos
