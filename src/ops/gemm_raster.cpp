#include "ops/gemm_raster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

double estimate_hbm_bytes(const std::vector<GemmRun>& order, const RasterProblem& p, int64_t l2_bytes) {
  // Tasks of expected-empty slots return at once on the device: drop them (and the empty tail of a
  // run down M), so they neither read nor hold a CTA of the wave.
  const int64_t real_end = p.m_real_end > 0 ? p.m_real_end : INT64_MAX;
  std::vector<GemmRun> work;
  work.reserve(order.size());
  int max_m = 0, max_n = 0;
  for (GemmRun t : order) {
    if (t.tile_m >= real_end) continue;
    if (!t.along_n) t.count = uint32_t(std::min<int64_t>(t.count, real_end - t.tile_m));
    max_m = std::max(max_m, int(t.tile_m + (t.along_n ? 0 : t.count - 1)));
    max_n = std::max(max_n, int(t.tile_n + (t.along_n ? t.count - 1 : 0)));
    work.push_back(t);
  }
  // A block identity: its m block. B block identity: n, or (group, n) for grouped problems.
  const int spg = p.slots_per_group;
  const int n_span = max_n + 1;
  auto b_id = [&](int m, int n) { return spg > 0 ? (m - p.m_begin) / spg * n_span + n : n; };
  // a_step / b_step[id]: the last step that read the block. Read in this step: counted once; in the
  // previous one: an L2 hit if that step's blocks fit.
  std::vector<int64_t> a_step(size_t(max_m) + 1, -1), b_step(size_t(b_id(max_m, max_n)) + 1, -1);
  const size_t ctas = size_t(std::max(1, p.ctas));
  double bytes = 0;
  bool prev_fits = false;
  int64_t step = 0;
  for (size_t w0 = 0; w0 < work.size(); w0 += ctas) {
    const size_t w1 = std::min(work.size(), w0 + ctas);
    uint32_t steps = 0;
    for (size_t i = w0; i < w1; ++i) steps = std::max(steps, work[i].count);
    for (uint32_t j = 0; j < steps; ++j, ++step) {
      int64_t a_blocks = 0, b_blocks = 0;
      auto read = [&](int64_t& last, int64_t block_bytes, int64_t& blocks) {
        if (last == step) return;
        if (!(prev_fits && last == step - 1)) bytes += double(block_bytes);
        last = step;
        ++blocks;
      };
      for (size_t i = w0; i < w1; ++i) {
        const GemmRun& t = work[i];
        if (j >= t.count) continue;
        const int m = int(t.tile_m + (t.along_n ? 0 : j)), n = int(t.tile_n + (t.along_n ? j : 0));
        read(a_step[size_t(m)], p.a_block_bytes, a_blocks);
        read(b_step[size_t(b_id(m, n))], p.b_block_bytes, b_blocks);
      }
      prev_fits = a_blocks * p.a_block_bytes + b_blocks * p.b_block_bytes <= l2_bytes;
    }
  }
  return bytes;
}

double estimate_hbm_bytes(const std::vector<GemmRun>& order, int ctas, int64_t a_block_bytes, int64_t b_block_bytes,
                          int64_t l2_bytes) {
  RasterProblem p;
  p.ctas = ctas;
  p.a_block_bytes = a_block_bytes;
  p.b_block_bytes = b_block_bytes;
  return estimate_hbm_bytes(order, p, l2_bytes);
}

namespace {
// The estimate, averaged over where the group boundaries fall when slots_per_group is a guess: the
// device maps slots to groups from the run-time sizes, and an order that does well only when its
// runs or claim groups line up with the guessed groups (runs of slots_per_group down M, say) would
// do worse on real sizes.
double expected_hbm_bytes(const std::vector<GemmRun>& order, const RasterProblem& p) {
  if (p.slots_per_group <= 1 || p.exact_groups) return estimate_hbm_bytes(order, p, kL2Bytes);
  const int shifts = std::min(p.slots_per_group, 4);
  double sum = 0;
  for (int s = 0; s < shifts; ++s) {
    RasterProblem q = p;
    q.m_begin -= s * p.slots_per_group / shifts;  // moves every boundary s/shifts of a group down
    sum += estimate_hbm_bytes(order, q, kL2Bytes);
  }
  return sum / shifts;
}
}  // namespace

std::vector<uint32_t> distinct_run_lengths(int dim) {
  std::vector<uint32_t> lengths;
  for (int run = 1; run <= std::min(dim, 16); ++run)
    if (run == 1 || (dim + run - 1) / run < (dim + run - 2) / (run - 1)) lengths.push_back(uint32_t(run));
  return lengths;
}

RasterChoice evaluate_order(const RasterProblem& p, bool along_n, uint32_t run, int group) {
  const int share = p.share_ctas > 0 ? p.share_ctas : std::max(1, p.ctas);
  // The makespan counts the m blocks expected to hold work (all of them when none is marked empty).
  const int real_end = p.m_real_end > 0 ? std::min(p.m_real_end, p.m_end) : p.m_end;
  const std::vector<GemmRun> order = make_order(p, along_n, run, group);
  const auto busy = std::count_if(order.begin(), order.end(), [&](const GemmRun& t) { return int(t.tile_m) < real_end; });
  // Grouped: the busy task count is a guess good to ~G/2 slots (several waves' worth), so any
  // fill of the last wave is as likely as another: half a wave on average, not ceil()'s steps.
  const double waves = p.slots_per_group > 0 ? double(busy) / share + 0.5 : std::ceil(double(busy) / share);
  const double compute = waves * run * p.tile_seconds;
  const double hbm = expected_hbm_bytes(order, p);
  const double seconds = std::max(compute, hbm / kHbmBytesPerSecond) + waves * kRestartSeconds;
  return RasterChoice{along_n, run, group, seconds, hbm};
}

std::vector<GemmRun> make_gemm_runs(const RasterProblem& p, bool along_n, uint32_t run, int group, RasterChoice* described) {
  if (p.m_end - p.m_begin <= 0 || p.n_tiles <= 0) return {};
  run = std::max<uint32_t>(1, run);
  group = std::max(1, group);
  if (described) *described = evaluate_order(p, along_n, run, group);
  return make_order(p, along_n, run, group);
}

std::vector<GemmRun> plan_gemm_runs(const RasterProblem& p, RasterChoice* chosen, std::vector<RasterChoice>* considered) {
  const int m_tiles = p.m_end - p.m_begin;
  if (m_tiles <= 0 || p.n_tiles <= 0) return {};
  const int ctas = std::max(1, p.ctas);
  const int share = p.share_ctas > 0 ? p.share_ctas : ctas;
  const int real_end = p.m_real_end > 0 ? std::min(p.m_real_end, p.m_end) : p.m_end;
  const int real_m_tiles = real_end - p.m_begin;
  std::vector<RasterChoice> all;
  std::vector<bool> shorter_run;        // dense: shorter than the makespan-optimal length
  double longest_run_bytes = INFINITY;  // dense: the fewest bytes at the makespan-optimal lengths
  for (bool along_n : {false, true}) {
    if (along_n && !p.allow_along_n) continue;
    const int dim = along_n ? p.n_tiles : m_tiles;
    // Run lengths to try. Dense: the makespan-optimal one. Grouped: every length up to 16 (the
    // shortest for each number of runs; a longer one only unbalances the runs): no step of a large-K
    // grouped GEMM fits the L2 (each B block serves only its group's slots), so a run re-reads its
    // own A or B block every step and the best length trades sharing among concurrent CTAs against
    // restarts, which the makespan alone does not see.
    std::vector<uint32_t> lengths;
    if (p.slots_per_group > 0) {
      lengths = distinct_run_lengths(dim);
    } else {
      // Dense: the makespan-optimal length and every shorter one with the same makespan, longest
      // first (on equal estimates the longer run wins). One wave of long runs puts few tiles of
      // each row and column in flight: 8192^3 in runs of 16 down M has 4 A and 33 B blocks per step
      // (136 MB at K = 8192), so every step streams from HBM (ncu, H200: 2.96 GB read vs cuBLAS's
      // 1.27 GB); runs of 4 along N in groups of 8 cover a block of tiles per step at the same
      // makespan (1.09 GB by the estimate, 2.28 before; ncu: 1.09 GB, 1.51 -> 1.37 ms). A shorter run is kept only where it saves at least a
      // fifth of the bytes (below): it restarts more often, and smaller savings are inside the
      // estimate's error (24576 x 4096 x 7168: 1.5 % fewer bytes for six times the tasks).
      const int64_t m_t = along_n ? p.n_tiles : real_m_tiles, n_t = along_n ? real_m_tiles : p.n_tiles;
      const uint32_t best_run = choose_run_length(m_t, n_t, share);
      auto span = [&](int64_t run) { return (n_t * ((m_t + run - 1) / run) + share - 1) / share * run; };
      for (int64_t run = best_run; run >= 1; --run)
        if (span(run) == span(best_run) && (run == best_run || run == 1 || (m_t + run - 1) / run < (m_t + run - 2) / (run - 1)))
          lengths.push_back(uint32_t(run));
      // Longer runs too, each priced by the estimate (its longer makespan against its fewer
      // restarts): with many waves of short runs every task restarts the pipeline. 24,588 x 7,168
      // x 2,048 (193 x 28 tiles): runs of 1 make a 41-tile makespan, any longer run 42, so the
      // makespan alone took runs of 1 -- 41 restarts per CTA instead of 3 (standalone engine:
      // groups of 1 697 TF/s, runs of 14 741).
      for (const uint32_t run : distinct_run_lengths(int(m_t)))
        if (run > best_run) lengths.push_back(run);
    }
    for (const uint32_t run : lengths) {
      const int runs = (dim + int(run) - 1) / int(run);
      for (int g = 1;; g = std::min(2 * g, runs)) {
        const RasterChoice c = evaluate_order(p, along_n, run, g);
        const bool shorter = p.slots_per_group == 0 && run < lengths.front();
        if (run == lengths.front()) longest_run_bytes = std::min(longest_run_bytes, c.est_hbm_bytes);
        all.push_back(c);
        shorter_run.push_back(shorter);
        if (g == runs) break;
      }
    }
  }
  // The cheapest estimate; among those within 1 % of it, the fewest HBM bytes (a GEMM near the
  // bandwidth limit slows down before the max() says so), then the earlier candidate.
  for (size_t i = all.size(); i-- > 0;)
    if (shorter_run[i] && all[i].est_hbm_bytes > 0.8 * longest_run_bytes) all.erase(all.begin() + std::ptrdiff_t(i));
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

int expert_claim_group(const RasterProblem& p) {
  const int spg = p.slots_per_group;
  return !p.exact_groups && spg >= kExpertClaimMinSlots && spg <= kExpertClaimMaxSlots ? spg : 0;
}

RasterProblem raster_problem(const kernels::gemm::GemmParams& p, int m_begin, int m_end, int ctas, int64_t expected_rows) {
  constexpr double kSmFlopsPerSecond = 730e12 / 132;
  constexpr int bm = kernels::gemm::kGemmBlockM;
  const int bn = kernels::gemm::gemm_block_n(p.tile_shape);
  const bool grouped_k = (p.layout & kernels::gemm::kGemmGroupedK) != 0;
  // Grouped-K: a tile runs its group's K rows only, K_total / G on average.
  const int64_t k_total = grouped_k && expected_rows > 0 ? std::min<int64_t>(expected_rows, p.k) : p.k;
  const int64_t k = grouped_k ? std::max<int64_t>(1, k_total / std::max(1, p.num_groups)) : p.k;
  RasterProblem r;
  r.m_begin = m_begin;
  r.m_end = m_end;
  r.n_tiles = p.num_n_tiles;
  r.ctas = ctas;
  r.a_block_bytes = int64_t(bm) * k * 2;
  r.b_block_bytes = int64_t(bn) * k * 2;
  r.tile_seconds = 2.0 * bm * bn * double(k) / kSmFlopsPerSecond;
  if (grouped_k) {
    r.slots_per_group = (p.m + bm - 1) / bm;  // fixed tiles per group; A and B both per group
    r.exact_groups = true;
  } else if (p.num_groups > 0) {
    // The group sizes are known only on the device: assume the rows split evenly. The worst case
    // counts one extra slot per group; each group's last block is partial, about half full on
    // average, so about half of those extra slots hold work (the DeepSeek-V3 bench: 193 blocks of
    // rows, 208 slots used of 225).
    const int64_t rows = expected_rows > 0 ? std::min<int64_t>(expected_rows, p.m) : p.m;
    const int blocks = int((rows + bm - 1) / bm);
    r.slots_per_group = std::max(1, int(std::lround(double(blocks) / p.num_groups)));
    r.m_real_end = std::min(m_end, std::max(m_begin + 1, blocks + (p.num_groups + 1) / 2));
  }
  return r;
}

kernels::gemm::GemmTileArgs tile_args(uint32_t problem, const GemmRun& r) {
  kernels::gemm::GemmTileArgs a{problem, r.tile_m, r.tile_n, r.count, r.along_n ? uint32_t(kernels::gemm::kGemmRunAlongN) : 0u, {}};
  return a;
}

}  // namespace kosmos::ops
