// Fused TP/SP layers: plan construction (which tasks, in which order, waiting on what) and the
// layer object that owns every virtual rank's buffers.
//
// Building blocks (R = M / W rows per rank, BM = 128):
//   all-gather  copy tasks on the SOURCE rank push row pieces (one per 128-row block of the
//               gathered matrix) into every rank's kGathered and signal that block's counter on
//               the destination. Rank r receives chunk (r + k) % W at step k: local data first.
//   gemm        tiles of the engine; a tile reading gathered rows waits, inside its pipeline,
//               for exactly the 128-row block (or K-slice) it is about to load (deferred waits).
//   partial+reduce  each rank computes its partial [M, N] tile by tile (owner o's rows at step o,
//               the same order on every rank) and signals the owner's per-tile counter; the owner's
//               reduce task sums the W partials in rank order (fp32) once all arrived, writing its
//               rows (ReduceScatter) or every rank's rows (AllReduce).
//
//   insertion order (= priority among ready tasks; claims follow it), e.g. AG+GEMM:
//     copies(step 0) copies(step 1) gemm(step 0) copies(step 2) gemm(step 1) ... gemm(step W-1)
//   GEMM+RS:  gemm(owner 0) gemm(owner 1) reduce(owner 0) gemm(owner 2) reduce(owner 1) ...
#include "kosmos/tp.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

#include "kernels/reduce_tile.h"
#include "ops/gemm_raster.h"
#include "ops/op_runner.h"
#include "ops/rank_buffers.h"

namespace kosmos {

const char* to_string(TpOp op) {
  switch (op) {
    case TpOp::kAgGemm: return "ag_gemm";
    case TpOp::kGemmRs: return "gemm_rs";
    case TpOp::kGemmAr: return "gemm_ar";
    case TpOp::kColParallelBwd: return "col_parallel_bwd";
    case TpOp::kRowParallelBwd: return "row_parallel_bwd";
  }
  return "unknown";
}

const char* to_string(TpBuffer b) {
  switch (b) {
    case TpBuffer::kX: return "X";
    case TpBuffer::kW: return "W";
    case TpBuffer::kY: return "Y";
    case TpBuffer::kGathered: return "gathered";
    case TpBuffer::kPartial: return "partial";
    case TpBuffer::kDY: return "dY";
    case TpBuffer::kDX: return "dX";
    case TpBuffer::kDW: return "dW";
    case TpBuffer::kCount: break;
  }
  return "unknown";
}

TpBufferShape tp_buffer_shape(const TpConfig& c, TpBuffer b) {
  const int64_t W = c.world, M = c.m, N = c.n, K = c.k, R = M / std::max(1, c.world);
  auto S = [](int64_t r, int64_t cl) { return TpBufferShape{true, r, cl}; };
  const bool many = W > 1;
  switch (c.op) {
    case TpOp::kAgGemm:
      if (b == TpBuffer::kX) return S(R, K);
      if (b == TpBuffer::kW) return S(K, N / W);
      if (b == TpBuffer::kY) return S(M, N / W);
      if (b == TpBuffer::kGathered && many) return S(M, K);
      break;
    case TpOp::kGemmRs:
    case TpOp::kGemmAr:
      if (b == TpBuffer::kX) return S(M, K / W);
      if (b == TpBuffer::kW) return S(K / W, N);
      if (b == TpBuffer::kPartial && many) return S(M, N);
      if (b == TpBuffer::kY) return c.op == TpOp::kGemmRs ? S(R, N) : S(M, N);
      break;
    case TpOp::kColParallelBwd:
      if (b == TpBuffer::kX) return S(R, K);
      if (b == TpBuffer::kW) return S(K, N / W);
      if (b == TpBuffer::kDY) return S(M, N / W);
      if (b == TpBuffer::kGathered && many) return S(M, K);
      if (b == TpBuffer::kPartial && many) return S(M, K);
      if (b == TpBuffer::kDX) return S(R, K);
      if (b == TpBuffer::kDW) return S(K, N / W);
      break;
    case TpOp::kRowParallelBwd:
      if (b == TpBuffer::kX) return S(M, K / W);
      if (b == TpBuffer::kW) return S(K / W, N);
      if (b == TpBuffer::kDY) return S(R, N);
      if (b == TpBuffer::kGathered && many) return S(M, N);
      if (b == TpBuffer::kDX) return S(M, K / W);
      if (b == TpBuffer::kDW) return S(K / W, N);
      break;
  }
  return {};
}

namespace {

using kernels::gemm::GemmTileArgs;
constexpr int kBM = kernels::gemm::kGemmBlockM;
uint32_t buf(TpBuffer b) { return uint32_t(b); }

// A task before it goes into a builder, tagged with its phase for the unfused composition
// (phase 0: communication / partial products; phase 1: what consumes them).
struct TaskRec {
  TaskRec(plan::TaskKind k, uint32_t r) : kind(k), rank(r) {}
  plan::TaskKind kind;
  uint32_t rank;
  uint32_t args[plan::kTaskArgWords] = {};
  std::vector<plan::Wait> waits;
  std::vector<plan::Signal> signals;
  int phase = 0;
};

struct GemmRef {  // a GEMM problem's geometry, for tiling
  uint32_t problem;
  int32_t m_tiles, n_tiles, bn;
  int phase;
};

class TpPlanner {
 public:
  // ctas: one launch's CTAs on one GPU. own_gpu: one process per GPU (plan_distributed), each
  // rank's tasks get all of them; with virtual ranks the W ranks share them.
  TpPlanner(const TpConfig& c, int ctas, bool own_gpu = false)
      : c_(c), W_(c.world), R_(c.m / c.world), ctas_(ctas), share_ctas_(own_gpu ? ctas : std::max(1, ctas / c.world)) {}

  // Declares a GEMM problem on `rank` over TP buffers (dense row-major, leading dim = cols).
  Status add_problem(uint32_t rank, TpBuffer a, bool a_col_major, TpBuffer b, bool b_transposed, TpBuffer cbuf,
                     int64_t m, int64_t n, int64_t k, ops::GemmWaitRule rule, int phase, GemmRef* ref) {
    ops::GemmProblemSpec s;
    auto& d = s.desc;
    d.m = m;
    d.n = n;
    d.k = k;
    d.a_col_major = a_col_major;
    d.lda = a_col_major ? m : k;
    d.b_transposed = b_transposed;
    d.ldb = b_transposed ? k : n;
    d.ldc = n;
    d.num_sms = ctas_;
    s.rank = rank;
    s.a_buffer = buf(a);
    s.b_buffer = buf(b);
    s.c_buffer = buf(cbuf);
    s.rule = rule;
    // Validate shapes now (dummy aligned pointers; the real ones are bound before the first run).
    kernels::gemm::GemmDesc probe = d;
    probe.a = probe.b = probe.c = reinterpret_cast<void*>(uintptr_t(4096));
    probe.encode_tma = false;
    kernels::gemm::GemmParams p;
    Status st = kernels::gemm::make_gemm_params(probe, &p);
    if (!st) return Status(st.code(), std::string(to_string(c_.op)) + " GEMM on rank " + std::to_string(rank) + ": " + st.message());
    *ref = GemmRef{uint32_t(problems_.size()), p.num_m_tiles, p.num_n_tiles, kernels::gemm::gemm_block_n(p.tile_shape), phase};
    problems_.push_back(s);
    shapes_.push_back(p);
    phases_.push_back(phase);
    return Status::ok();
  }

  // The tasks of m blocks [mb0, mb1) of one GEMM, in the claim order ops::plan_gemm_runs picks for
  // L2 reuse (runs down M or along N). Deferred waits: `deferred` on every task, plus with
  // deferred_per_mblock one per m block the run covers (counter deferred_base + m block).
  template <class SignalFn>
  void gemm_tasks(const GemmRef& g, uint32_t rank, int mb0, int mb1, const std::vector<uint32_t>& deferred,
                  bool deferred_per_mblock, uint32_t deferred_base, SignalFn&& per_tile_signal) {
    mb1 = std::min(mb1, g.m_tiles);
    if (mb1 <= mb0) return;
    ops::RasterProblem rp = ops::raster_problem(shapes_[g.problem], mb0, mb1, ctas_);
    rp.share_ctas = share_ctas_;
    for (const ops::GemmRun& run : ops::plan_gemm_runs(rp)) {
      TaskRec t(plan::TaskKind::kGemmTile, rank);
      const GemmTileArgs a = ops::tile_args(g.problem, run);
      std::memcpy(t.args, &a, sizeof(a));
      for (uint32_t w : deferred) t.waits.push_back({w, plan::kWaitAll | plan::kDeferredWait});
      const uint32_t m_blocks = run.along_n ? 1 : run.count;
      if (deferred_per_mblock)
        for (uint32_t i = 0; i < m_blocks; ++i) t.waits.push_back({deferred_base + run.tile_m + i, plan::kWaitAll | plan::kDeferredWait});
      for (uint32_t i = 0; i < run.count; ++i)
        per_tile_signal(t, int(run.tile_m) + (run.along_n ? 0 : int(i)), int(run.tile_n) + (run.along_n ? int(i) : 0));
      t.phase = g.phase;
      tasks_.push_back(std::move(t));
    }
  }

  // All-gather step k: every destination r receives chunk (r + k) % W of `src` into `dst`. Each
  // copy signals its 128-row block's counter and, when given, destination r's join counter.
  void allgather_step(int k, TpBuffer src, TpBuffer dst, int64_t cols, uint32_t counter_base,
                      uint32_t join = ops::GemmWaitRule::kNoWait) {
    for (int r = 0; r < W_; ++r) {
      const int c = (r + k) % W_;
      for (int64_t row = int64_t(c) * R_; row < int64_t(c + 1) * R_;) {
        const int64_t mb = row / kBM;
        const int64_t end = std::min<int64_t>(int64_t(c + 1) * R_, (mb + 1) * kBM);
        TaskRec t(plan::TaskKind::kCopy, uint32_t(c));
        plan::CopyArgs a{uint16_t(buf(src)), uint16_t(c), uint16_t(buf(dst)), uint16_t(r),
                         uint64_t(row - int64_t(c) * R_) * cols * 2, uint64_t(row) * cols * 2, uint64_t(end - row) * cols * 2};
        std::memcpy(t.args, &a, sizeof(a));
        t.signals.push_back({uint32_t(counter_base + mb), uint16_t(r), 1});
        if (join != ops::GemmWaitRule::kNoWait) t.signals.push_back({join, uint16_t(r), 1});
        t.phase = 0;
        tasks_.push_back(std::move(t));
        row = end;
      }
    }
  }

  // Reduce tasks of owner o for a partial problem with tile geometry g over [M, cols]. broadcast:
  // each task writes its rows into every rank's `out` and signals `written` on every rank (see
  // written_barrier).
  void reduce_owner(int o, const GemmRef& g, int64_t cols, TpBuffer out, bool broadcast, uint32_t rs_base,
                    uint32_t written = 0) {
    const int64_t r0 = int64_t(o) * R_, r1 = r0 + R_;
    for (int64_t mb = r0 / kBM; mb * kBM < r1; ++mb)
      for (int nb = 0; nb < g.n_tiles; ++nb) {
        const int64_t row0 = std::max(r0, mb * kBM), row1 = std::min(r1, (mb + 1) * kBM);
        TaskRec t(plan::TaskKind::kReduceTile, uint32_t(o));
        kernels::ReduceArgs a{};
        a.src_buffer = uint16_t(buf(TpBuffer::kPartial));
        a.dst_buffer = uint16_t(buf(out));
        a.num_sources = uint16_t(W_);
        a.flags = broadcast ? kernels::kReduceBroadcast : 0;
        a.src_row0 = uint32_t(row0);
        a.dst_row0 = uint32_t(broadcast ? row0 : row0 - r0);
        a.col0 = uint32_t(nb) * g.bn;
        a.rows = uint32_t(row1 - row0);
        a.cols = uint32_t(std::min<int64_t>(g.bn, cols - a.col0));
        a.src_ld = a.dst_ld = uint32_t(cols);
        std::memcpy(t.args, &a, sizeof(a));
        t.waits.push_back({uint32_t(rs_base + mb * g.n_tiles + nb), plan::kWaitAll});
        if (broadcast)
          for (int r = 0; r < W_; ++r) t.signals.push_back({written, uint16_t(r), 1});
        t.phase = 1;
        tasks_.push_back(std::move(t));
      }
  }

  // Tasks that write other ranks' outputs end nowhere in those ranks' own plans: one process per
  // GPU, a rank's launch could end -- and finish() return -- while a peer's broadcast still writes
  // its rows. So each rank gets a last task (phase `phase`) that waits for every signal of
  // `written` this run: its launch ends only after all writes into it are visible. The counter is
  // kept in the unfused composition too (phase-local: signalled and waited in the same launch).
  void written_barrier(uint32_t written, int phase) {
    phase_local_.push_back(written);
    for (int r = 0; r < W_; ++r) {
      TaskRec t(plan::TaskKind::kNop, uint32_t(r));
      t.waits.push_back({written, plan::kWaitAll});
      t.phase = phase;
      tasks_.push_back(std::move(t));
    }
  }

  // Partial-product tiles of rank s for owner o's rows; each tile signals its owners' counters.
  void partial_owner(int o, const GemmRef& g, uint32_t s, uint32_t rs_base) {
    // A block straddling two owners is computed in the first owner's step (chunk_blocks' rule).
    const int first = int((int64_t(o) * R_ + kBM - 1) / kBM);
    const int last = o == W_ - 1 ? g.m_tiles : int((int64_t(o + 1) * R_ + kBM - 1) / kBM);
    gemm_tasks(g, s, first, last, {}, false, 0, [&](TaskRec& t, int mb, int nb) {
      const int64_t row0 = int64_t(mb) * kBM, row1 = std::min<int64_t>(c_.m, row0 + kBM);
      for (int64_t owner = row0 / R_; owner < W_ && owner * R_ < row1; ++owner)
        t.signals.push_back({uint32_t(rs_base + mb * g.n_tiles + nb), uint16_t(owner), 1});
    });
  }

  Status build_plans(std::vector<plan::Plan>* plans, std::vector<std::vector<ops::GemmProblemSpec>>* specs) const {
    plans->clear();
    specs->clear();
    const int num = c_.fused ? 1 : 2;
    for (int ph = 0; ph < num; ++ph) {
      plan::PlanBuilder b(uint32_t(W_), std::string(to_string(c_.op)) + (c_.fused ? "" : ph ? "_phase1" : "_phase0"));
      for (uint32_t i = 0; i < uint32_t(TpBuffer::kCount); ++i) {
        const TpBufferShape sh = tp_buffer_shape(c_, TpBuffer(i));
        b.add_buffer(to_string(TpBuffer(i)), sh.exists ? uint64_t(sh.rows) * sh.cols * 2 : 0, true);
      }
      b.add_counters(num_counters_);
      for (const TaskRec& t : tasks_) {
        if (!c_.fused && t.phase != ph) continue;
        const uint32_t id = b.add_task(t.kind, t.rank);
        // payload
        b.set_args(id, t.args);
        // unfused: the waits cross the phase boundary (dropped), except on phase-local counters
        auto keep = [&](uint32_t counter) {
          return c_.fused || std::find(phase_local_.begin(), phase_local_.end(), counter) != phase_local_.end();
        };
        for (const plan::Wait& w : t.waits)
          if (keep(w.counter)) b.wait(id, w.counter, w.target);
        for (const plan::Signal& s : t.signals)
          if (keep(s.counter)) b.signal(id, s.rank, s.counter, s.amount);
      }
      plan::Plan p;
      KOSMOS_RETURN_IF_ERROR(b.build(&p));
      plans->push_back(std::move(p));
      std::vector<ops::GemmProblemSpec> sp = problems_;
      if (!c_.fused)
        for (auto& s : sp) s.rule = ops::GemmWaitRule{};
      specs->push_back(std::move(sp));
    }
    return Status::ok();
  }

  uint32_t counters(uint32_t n) {
    uint32_t base = num_counters_;
    num_counters_ += n;
    return base;
  }
  int W() const { return W_; }
  int64_t R() const { return R_; }
  std::vector<TaskRec>& tasks() { return tasks_; }

 private:
  TpConfig c_;
  int W_;
  int64_t R_;
  int ctas_;
  int share_ctas_;  // the CTAs one rank's tasks get
  uint32_t num_counters_ = 0;
  std::vector<uint32_t> phase_local_;  // counters kept in the unfused composition (written_barrier)
  std::vector<ops::GemmProblemSpec> problems_;
  std::vector<kernels::gemm::GemmParams> shapes_;  // per problem: tile counts, K, tile shape
  std::vector<int> phases_;
  std::vector<TaskRec> tasks_;
};

Status validate(const TpConfig& c) {
  KOSMOS_CHECK(c.world >= 1 && c.world <= 64, "TP world = ", c.world, ", expected 1..64");
  KOSMOS_CHECK(c.m > 0 && c.n > 0 && c.k > 0, "TP sizes must be positive, got M = ", c.m, ", N = ", c.n, ", K = ", c.k);
  KOSMOS_CHECK(c.m % c.world == 0, "TP: M = ", c.m, " is not divisible by the world size ", c.world);
  const bool split_n = c.op == TpOp::kAgGemm || c.op == TpOp::kColParallelBwd;
  if (split_n) KOSMOS_CHECK(c.n % c.world == 0, "TP ", to_string(c.op), ": N = ", c.n, " is not divisible by the world size ", c.world);
  else KOSMOS_CHECK(c.k % c.world == 0, "TP ", to_string(c.op), ": K = ", c.k, " is not divisible by the world size ", c.world);
  const int64_t local = split_n ? c.n / c.world : c.k / c.world;
  KOSMOS_CHECK(local % 8 == 0 && c.n % 8 == 0 && c.k % 8 == 0, "TP ", to_string(c.op), ": N = ", c.n, ", K = ", c.k,
               " and the per-rank shard ", local, " must be multiples of 8 (16-byte rows for TMA)");
  return Status::ok();
}

// A GEMM with no communication: every tile of the problem, no waits or signals.
Status plain_gemm(TpPlanner& P, TpBuffer a, bool a_col, TpBuffer b, bool b_t, TpBuffer c, int64_t m, int64_t n, int64_t k,
                  int phase) {
  GemmRef g;
  KOSMOS_RETURN_IF_ERROR(P.add_problem(0, a, a_col, b, b_t, c, m, n, k, ops::GemmWaitRule{}, phase, &g));
  P.gemm_tasks(g, 0, 0, g.m_tiles, {}, false, 0, [](TaskRec&, int, int) {});
  return Status::ok();
}

// 128-row blocks of gathered chunk `ch`: [ceil(ch*R/BM), ceil((ch+1)*R/BM)); a block straddling two
// chunks belongs to the earlier chunk's step (it waits for both pieces through its counter).
std::pair<int, int> chunk_blocks(int ch, int W, int64_t R, int m_tiles) {
  auto ceil_blocks = [](int64_t rows) { return int((rows + kBM - 1) / kBM); };
  return {ceil_blocks(int64_t(ch) * R), ch == W - 1 ? m_tiles : ceil_blocks(int64_t(ch + 1) * R)};
}

// W = 1 backward of either linear: dX = dY · Wᵀ and dW = Xᵀ · dY, no communication.
Status plain_backward(TpPlanner& P, int64_t M, int64_t N, int64_t K) {
  KOSMOS_RETURN_IF_ERROR(plain_gemm(P, TpBuffer::kDY, false, TpBuffer::kW, true, TpBuffer::kDX, M, K, N, 0));
  return plain_gemm(P, TpBuffer::kX, true, TpBuffer::kDY, false, TpBuffer::kDW, K, N, M, 1);
}

// Builds the tasks of one op into the planner.
Status plan_op(const TpConfig& c, TpPlanner& P) {
  const int W = P.W();
  const int64_t M = c.m, N = c.n, K = c.k, R = P.R();
  const int64_t MB = (M + kBM - 1) / kBM;
  auto no_signal = [](TaskRec&, int, int) {};
  ops::GemmWaitRule none;  // partial products wait for nothing inside the tile

  switch (c.op) {
    case TpOp::kAgGemm: {
      if (W == 1) return plain_gemm(P, TpBuffer::kX, false, TpBuffer::kW, false, TpBuffer::kY, M, N, K, 1);
      const uint32_t ag = P.counters(uint32_t(MB));
      std::vector<GemmRef> g(W);
      ops::GemmWaitRule rule{ag, uint32_t(kBM), 0};
      for (int r = 0; r < W; ++r)
        KOSMOS_RETURN_IF_ERROR(P.add_problem(r, TpBuffer::kGathered, false, TpBuffer::kW, false, TpBuffer::kY, M, N / W, K, rule, 1, &g[r]));
      P.allgather_step(0, TpBuffer::kX, TpBuffer::kGathered, K, ag);
      for (int k = 0; k < W; ++k) {
        if (k + 1 < W) P.allgather_step(k + 1, TpBuffer::kX, TpBuffer::kGathered, K, ag);
        for (int r = 0; r < W; ++r) {
          auto [b0, b1] = chunk_blocks((r + k) % W, W, R, g[r].m_tiles);
          P.gemm_tasks(g[r], r, b0, std::max(b0, b1), {}, true, ag, no_signal);
        }
      }
      return Status::ok();
    }
    case TpOp::kGemmRs:
    case TpOp::kGemmAr: {
      const bool ar = c.op == TpOp::kGemmAr;
      if (W == 1) return plain_gemm(P, TpBuffer::kX, false, TpBuffer::kW, false, TpBuffer::kY, M, N, K, 0);
      std::vector<GemmRef> g(W);
      for (int s = 0; s < W; ++s)
        KOSMOS_RETURN_IF_ERROR(P.add_problem(s, TpBuffer::kX, false, TpBuffer::kW, false, TpBuffer::kPartial, M, N, K / W, none, 0, &g[s]));
      const uint32_t rs = P.counters(uint32_t(MB * g[0].n_tiles));
      const uint32_t written = ar ? P.counters(1) : 0;  // all-reduce: broadcasts into every rank's Y
      for (int o = 0; o < W; ++o) {
        for (int s = 0; s < W; ++s) P.partial_owner(o, g[s], s, rs);
        if (o > 0) P.reduce_owner(o - 1, g[0], N, TpBuffer::kY, ar, rs, written);
      }
      P.reduce_owner(W - 1, g[0], N, TpBuffer::kY, ar, rs, written);
      if (ar) P.written_barrier(written, 1);
      return Status::ok();
    }
    case TpOp::kColParallelBwd: {
      // dX_r = RS(dY_r · W_rᵀ) [R, K];  dW_r = AG(X)ᵀ · dY_r [K, N/W]
      if (W == 1) return plain_backward(P, M, N, K);
      const uint32_t ag = P.counters(uint32_t(MB)), ag_all = P.counters(1);
      std::vector<GemmRef> gx(W), gw(W);
      for (int s = 0; s < W; ++s)
        KOSMOS_RETURN_IF_ERROR(P.add_problem(s, TpBuffer::kDY, false, TpBuffer::kW, true, TpBuffer::kPartial, M, K, N / W, none, 0, &gx[s]));
      ops::GemmWaitRule rule{ag, 0, uint32_t(kBM), ag_all};
      for (int r = 0; r < W; ++r)
        KOSMOS_RETURN_IF_ERROR(P.add_problem(r, TpBuffer::kGathered, true, TpBuffer::kDY, false, TpBuffer::kDW, K, N / W, M, rule, 1, &gw[r]));
      const uint32_t rs = P.counters(uint32_t(MB * gx[0].n_tiles));
      for (int o = 0; o < W; ++o) {
        P.allgather_step(o, TpBuffer::kX, TpBuffer::kGathered, K, ag, ag_all);
        for (int s = 0; s < W; ++s) P.partial_owner(o, gx[s], s, rs);
        if (o > 0) P.reduce_owner(o - 1, gx[0], K, TpBuffer::kDX, false, rs);
      }
      P.reduce_owner(W - 1, gx[0], K, TpBuffer::kDX, false, rs);
      // dW tiles stream K-slices as they arrive; their one deferred wait (the join of every copy
      // into the rank) orders them after the all-gather for the planner.
      for (int r = 0; r < W; ++r) P.gemm_tasks(gw[r], r, 0, gw[r].m_tiles, {ag_all}, false, 0, no_signal);
      return Status::ok();
    }
    case TpOp::kRowParallelBwd: {
      // dX_r = AG(dY) · W_rᵀ [M, K/W];  dW_r = X_rᵀ · AG(dY) [K/W, N]
      if (W == 1) return plain_backward(P, M, N, K);
      const uint32_t ag = P.counters(uint32_t(MB)), ag_all = P.counters(1);
      std::vector<GemmRef> gx(W), gw(W);
      ops::GemmWaitRule mrule{ag, uint32_t(kBM), 0, ag_all}, krule{ag, 0, uint32_t(kBM), ag_all};
      for (int r = 0; r < W; ++r) {
        KOSMOS_RETURN_IF_ERROR(P.add_problem(r, TpBuffer::kGathered, false, TpBuffer::kW, true, TpBuffer::kDX, M, K / W, N, mrule, 1, &gx[r]));
        KOSMOS_RETURN_IF_ERROR(P.add_problem(r, TpBuffer::kX, true, TpBuffer::kGathered, false, TpBuffer::kDW, K / W, N, M, krule, 1, &gw[r]));
      }
      P.allgather_step(0, TpBuffer::kDY, TpBuffer::kGathered, N, ag, ag_all);
      for (int k = 0; k < W; ++k) {
        if (k + 1 < W) P.allgather_step(k + 1, TpBuffer::kDY, TpBuffer::kGathered, N, ag, ag_all);
        for (int r = 0; r < W; ++r) {
          auto [b0, b1] = chunk_blocks((r + k) % W, W, R, gx[r].m_tiles);
          P.gemm_tasks(gx[r], r, b0, std::max(b0, b1), {}, true, ag, no_signal);
        }
      }
      for (int r = 0; r < W; ++r) P.gemm_tasks(gw[r], r, 0, gw[r].m_tiles, {ag_all}, false, 0, no_signal);
      return Status::ok();
    }
  }
  return Status(StatusCode::kInvalidArgument, "unknown TP op");
}

}  // namespace

struct TpLayer::Impl {
  TpConfig cfg;
  const TpDistributed* dist = nullptr;
  TpDistributed dist_copy;
  std::vector<plan::Plan> plans;
  ops::RankBuffers mem;  // declared before the runners: they are destroyed first
  std::vector<std::unique_ptr<ops::OpRunner>> runners;
};

TpLayer::~TpLayer() = default;

Status tp_plans(const TpConfig& cfg, int ctas, std::vector<plan::Plan>* plans) {
  KOSMOS_CHECK(plans != nullptr, "tp_plans: plans is null");
  KOSMOS_RETURN_IF_ERROR(validate(cfg));
  TpPlanner P(cfg, ctas);
  KOSMOS_RETURN_IF_ERROR(plan_op(cfg, P));
  std::vector<std::vector<ops::GemmProblemSpec>> specs;
  return P.build_plans(plans, &specs);
}

Status TpLayer::plan(const TpConfig& cfg, std::unique_ptr<TpLayer>* out) { return plan_impl(cfg, nullptr, out); }

Status TpLayer::plan_distributed(const TpConfig& cfg, const TpDistributed& dist, std::unique_ptr<TpLayer>* out) {
  KOSMOS_RETURN_IF_ERROR(ops::check_distributed(dist, cfg.world, "TpLayer"));
  return plan_impl(cfg, &dist, out);
}

Status TpLayer::plan_impl(const TpConfig& cfg, const TpDistributed* dist, std::unique_ptr<TpLayer>* out) {
  KOSMOS_CHECK(out != nullptr, "TpLayer::plan: out is null");
  KOSMOS_RETURN_IF_ERROR(validate(cfg));
  TpPlanner P(cfg, ops::op_ctas(cfg.cpu, cfg.max_ctas), dist != nullptr);
  KOSMOS_RETURN_IF_ERROR(plan_op(cfg, P));
  // A W = 1 problem may have put everything in one phase; the unfused composition then has an
  // empty phase, which is skipped.
  std::vector<plan::Plan> plans;
  std::vector<std::vector<ops::GemmProblemSpec>> specs;
  KOSMOS_RETURN_IF_ERROR(P.build_plans(&plans, &specs));
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  // Whether a phase has a runner is decided on the whole plan, never on a rank's part of it: a
  // runner's counters are a collective allocation (use_symmetric_counters), so every rank must make
  // the same runners even where a phase holds no task of its own.
  std::vector<bool> phase_empty;
  for (const auto& p : plans) phase_empty.push_back(p.tasks.empty());
  if (dist) {
    impl->dist_copy = *dist;
    impl->dist = &impl->dist_copy;
    for (auto& p : plans) p = plan::restrict_to_rank(p, uint32_t(dist->rank));
  }
  const uint32_t W = uint32_t(cfg.world), nb = uint32_t(TpBuffer::kCount);
  KOSMOS_RETURN_IF_ERROR(impl->mem.allocate(
      nb, W, cfg.cpu, dist,
      [&](uint32_t b) {
        const TpBufferShape sh = tp_buffer_shape(cfg, TpBuffer(b));
        return sh.exists ? size_t(sh.rows) * sh.cols * 2 : size_t(0);
      },
      [](uint32_t b) { return std::string(to_string(TpBuffer(b))); }));
  ops::RunnerOptions ro;
  ro.executor = cfg.cpu ? ops::ExecutorKind::kCpu : ops::ExecutorKind::kGpu;
  ro.watchdog_seconds = cfg.watchdog_seconds;
  ro.trace = cfg.trace;
  ro.max_ctas = cfg.max_ctas;
  ro.cpu_workers = 4;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (phase_empty[i]) continue;
    std::unique_ptr<ops::OpRunner> r;
    KOSMOS_RETURN_IF_ERROR(ops::OpRunner::create(plans[i], specs[i], ro, &r));
    for (uint32_t b = 0; b < nb; ++b)
      for (uint32_t rank = 0; rank < W; ++rank) {
        void* p = impl->mem.at(b, rank);
        // Absent buffers get a harmless stand-in: no task touches them.
        KOSMOS_RETURN_IF_ERROR(r->bind(b, rank, p ? p : impl->mem.at(uint32_t(TpBuffer::kX), rank)));
      }
    if (dist) KOSMOS_RETURN_IF_ERROR(ops::use_symmetric_counters(*r, *dist, cfg.cpu));  // .sys scope on GPUs
    impl->runners.push_back(std::move(r));
    impl->plans.push_back(plans[i]);
  }
  std::unique_ptr<TpLayer> layer(new TpLayer());
  layer->impl_ = std::move(impl);
  *out = std::move(layer);
  return Status::ok();
}

void* TpLayer::buffer(TpBuffer b, int rank) const { return impl_->mem.at(uint32_t(b), uint32_t(rank)); }

size_t TpLayer::buffer_bytes(TpBuffer b) const {
  const TpBufferShape s = tp_buffer_shape(impl_->cfg, b);
  return s.exists ? size_t(s.rows) * s.cols * 2 : 0;
}

Status TpLayer::run(cudaStream_t stream) {
  for (auto& r : impl_->runners) {
    if (impl_->dist) KOSMOS_RETURN_IF_ERROR(impl_->dist->barrier(stream));  // epoch barrier across ranks
    KOSMOS_RETURN_IF_ERROR(r->run(stream));
  }
  return Status::ok();
}

Status TpLayer::finish(cudaStream_t stream) {
  for (auto& r : impl_->runners) KOSMOS_RETURN_IF_ERROR(r->finish(stream));
  return Status::ok();
}

Status TpLayer::read_trace(std::vector<runtime::TraceRecord>* out) const {
  out->clear();
  for (auto& r : impl_->runners) {
    std::vector<runtime::TraceRecord> t;
    KOSMOS_RETURN_IF_ERROR(r->read_trace(&t));
    out->insert(out->end(), t.begin(), t.end());
  }
  return Status::ok();
}

size_t TpLayer::num_tasks() const {
  size_t n = 0;
  for (auto& p : impl_->plans) n += p.tasks.size();
  return n;
}

std::string TpLayer::describe() const {
  std::ostringstream os;
  for (auto& p : impl_->plans) {
    size_t kinds[32] = {};
    for (auto& t : p.tasks) kinds[std::min<size_t>(size_t(t.kind), 31)]++;
    os << p.name << ": " << p.tasks.size() << " tasks (" << kinds[size_t(plan::TaskKind::kCopy)] << " copy, "
       << kinds[size_t(plan::TaskKind::kGemmTile)] << " gemm, " << kinds[size_t(plan::TaskKind::kReduceTile)]
       << " reduce), " << p.num_counters << " counters/rank; ";
  }
  return os.str();
}

}  // namespace kosmos
