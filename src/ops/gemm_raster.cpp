#include "ops/gemm_raster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>


namespace kosmos::ops {

uint32_t choose_run_length(int64_t m_tiles, int64_t n_tiles, int ctas) {

  // Minimise the makespan ceil(tasks / ctas) * run, preferring longer runs on ties (the engine
  // overlaps the next tile's loads with the current epilogue inside a run).
  uint32_t best = 1;
  int64_t best_span = INT64_MAX;
  for (int64_t run = 1; run <= std::min<int64_t>(m_tiles, 16); ++run) {
    const int64_t tasks = n_tiles * ((m_tiles + run - 1) / run);
    const int64_t span = ((tasks + ctas - 1) / ctas) * run;
    if (span <= best_span) {
      best_span = span;
      best = uint32_t(run);
    }
  }
  return best;
}

namespace {
// H200 figures the estimate uses (measured there: device copy 4.2 TB/s; the L2 is 50 MB, of which
// the estimate trusts 40 MB to survive a step; restart = pipeline fill + unoverlapped epilogue of a
// task's first and last tile, from the engine's run-1 vs run-4 timings at K = 1.5K).
constexpr double kHbmBytesPerSecond = 3.6e12;
constexpr int64_t kL2Bytes = int64_t(40) << 20;
constexpr double kRestartSeconds = 2e-6;

std::vector<GemmRun> make_order(const RasterProblem& p, bool along_n, uint32_t run, int group) {
  std::vector<GemmRun> out;
  const int m_tiles = p.m_end - p.m_begin;
  const int dim = along_n ? p.n_tiles : m_tiles;  // the run walks this dimension
  const int other = along_n ? m_tiles : p.n_tiles;
  const int runs = (dim + int(run) - 1) / int(run);
  for (int g0 = 0; g0 < runs; g0 += group)
    for (int o = 0; o < other; ++o)
      for (int r = g0; r < std::min(runs, g0 + group); ++r) {
        GemmRun t;
        const int start = r * int(run);
        t.count = uint32_t(std::min(int(run), dim - start));
        t.along_n = along_n;
        t.tile_m = uint32_t(p.m_begin + (along_n ? o : start));
        t.tile_n = uint32_t(along_n ? start : o);
        out.push_back(t);
      }
  return out;
}
}  // namespace

std::string RasterChoice::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "runs of %u along %s, groups of %d, est. %.1f us, %.1f MB from HBM", run,
                along_n ? "N" : "M", group, est_seconds * 1e6, est_hbm_bytes / 1e6);
  return buf;
}

double estimate_hbm_bytes(const std::vector<GemmRun>& order, int ctas, int64_t a_block_bytes, int64_t b_block_bytes,
                          int64_t l2_bytes) {
  double bytes = 0;
  std::unordered_set<uint32_t> prev_m, prev_n, cur_m, cur_n;
  bool prev_fits = false;
  for (size_t w0 = 0; w0 < order.size(); w0 += size_t(std::max(1, ctas))) {
    const size_t w1 = std::min(order.size(), w0 + size_t(std::max(1, ctas)));
    uint32_t steps = 0;
    for (size_t i = w0; i < w1; ++i) steps = std::max(steps, order[i].count);
    for (uint32_t j = 0; j < steps; ++j) {
      cur_m.clear();
      cur_n.clear();
      for (size_t i = w0; i < w1; ++i) {
        const GemmRun& t = order[i];
        if (j >= t.count) continue;
        cur_m.insert(t.tile_m + (t.along_n ? 0 : j));
        cur_n.insert(t.tile_n + (t.along_n ? j : 0));
      }
      for (uint32_t m : cur_m)
        if (!(prev_fits && prev_m.count(m))) bytes += double(a_block_bytes);
      for (uint32_t n : cur_n)
        if (!(prev_fits && prev_n.count(n))) bytes += double(b_block_bytes);
      prev_fits = int64_t(cur_m.size()) * a_block_bytes + int64_t(cur_n.size()) * b_block_bytes <= l2_bytes;
      std::swap(prev_m, cur_m);
      std::swap(prev_n, cur_n);
    }
  }
  return bytes;
}

std::vector<GemmRun> plan_gemm_runs(const RasterProblem& p, RasterChoice* chosen, std::vector<RasterChoice>* considered) {
  const int m_tiles = p.m_end - p.m_begin;
  if (m_tiles <= 0 || p.n_tiles <= 0) return {};
  const int ctas = std::max(1, p.ctas);
  std::vector<RasterChoice> all;
  for (bool along_n : {false, true}) {
    if (along_n && !p.allow_along_n) continue;
    const int dim = along_n ? p.n_tiles : m_tiles, other = along_n ? m_tiles : p.n_tiles;
    const int share = p.share_ctas > 0 ? p.share_ctas : ctas;
    const uint32_t run = choose_run_length(dim, other, share);
    const int runs = (dim + int(run) - 1) / int(run);
    for (int g = 1;; g = std::min(2 * g, runs)) {
      const std::vector<GemmRun> order = make_order(p, along_n, run, g);
      const double waves = std::ceil(double(order.size()) / share);
      const double compute = waves * run * p.tile_seconds;
      const double hbm = estimate_hbm_bytes(order, ctas, p.a_block_bytes, p.b_block_bytes, kL2Bytes);
      all.push_back(RasterChoice{along_n, run, g, std::max(compute, hbm / kHbmBytesPerSecond) + waves * kRestartSeconds, hbm});
      if (g == runs) break;
    }
  }
  // The cheapest estimate; among those within 1 % of it, the fewest HBM bytes (a GEMM near the
  // bandwidth limit slows down before the max() says so), then the earlier candidate.
  double best_t = INFINITY;
  for (const auto& c : all) best_t = std::min(best_t, c.est_seconds);
  const RasterChoice* best = nullptr;
  for (const auto& c : all)
    if (c.est_seconds <= best_t * 1.01 && (!best || c.est_hbm_bytes < best->est_hbm_bytes)) best = &c;
  if (chosen) *chosen = *best;
  std::vector<GemmRun> order = make_order(p, best->along_n, best->run, best->group);
  if (considered) *considered = std::move(all);
  return order;
}

RasterProblem raster_problem(const kernels::gemm::GemmParams& p, int m_begin, int m_end, int ctas) {
  constexpr double kSmFlopsPerSecond = 730e12 / 132;
  const int bn = kernels::gemm::gemm_block_n(p.tile_shape);
  RasterProblem r;
  r.m_begin = m_begin;
  r.m_end = m_end;
  r.n_tiles = p.num_n_tiles;
  r.ctas = ctas;
  r.a_block_bytes = int64_t(kernels::gemm::kGemmBlockM) * p.k * 2;
  r.b_block_bytes = int64_t(bn) * p.k * 2;
  r.tile_seconds = 2.0 * kernels::gemm::kGemmBlockM * bn * double(p.k) / kSmFlopsPerSecond;
  r.allow_along_n = p.num_groups == 0;
  return r;
}

kernels::gemm::GemmTileArgs tile_args(uint32_t problem, const GemmRun& r) {
  kernels::gemm::GemmTileArgs a{problem, r.tile_m, r.tile_n, r.count, r.along_n ? uint32_t(kernels::gemm::kGemmRunAlongN) : 0u, {}};
  return a;
}

}  // namespace kosmos::ops
