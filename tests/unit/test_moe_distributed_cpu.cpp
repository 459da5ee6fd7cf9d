// The MoE layer's one-rank-per-process path on the CPU: one thread per rank, each with its own
// layer from MoeLayer::plan_distributed over a shared symmetric heap; fused and unfused runs, forward
// and backward; every rank's output (gradients) against fp64 and fused == unfused bit for bit.
#include <gtest/gtest.h>

#include <thread>

#include "../moe_check.h"
#include "../symmetric_heap.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
// One thread per rank, each with its own layer from MoeLayer::plan_distributed(c) over one shared
// symmetric heap; body(rank, layer, heap) returns the rank's error ("" = pass).
template <class Body>
void on_every_rank(const MoeConfig& c, const char* what, Body body) {
  const int W = c.world;
  SymmetricHeap heap(W);
  std::vector<std::string> errors(W);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < W; ++rank)
    ranks.emplace_back([&, rank] {
      std::unique_ptr<MoeLayer> L;
      const Status s = MoeLayer::plan_distributed(c, heap.context(rank), &L);
      errors[rank] = s ? body(rank, *L, heap) : s.to_string();
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) EXPECT_EQ(errors[r], "") << what << " W=" << W << " T=" << c.tokens << " rank " << r;
}

// Every rank writes its inputs, runs the fused launch twice (epochs advance), checks against fp64,
// then the unfused composition from poison must match bit for bit. The barriers keep the ranks in
// step (a rank's peers read its buffers during every run); a failing rank still joins them all.
void run_distributed(int W, int64_t T, int E, int k, Routing routing) {
  const MoeConfig c = moe_config(W, T, 64, 32, E, k, true);
  on_every_rank(c, "forward", [&](int rank, MoeLayer& L, SymmetricHeap& heap) -> std::string {
    MoeHost h{c};
    fill_moe(L, h, 31 + W, routing, rank);
    heap.barrier();
    Status s;
    for (int run = 0; run < 2 && s.is_ok(); ++run) s = L.run_composition(true);
    heap.barrier();
    std::string err = s ? check_moe(L, h, 1e-2, rank) : s.to_string();
    const std::vector<uint16_t> fused = read_y(L, rank);
    heap.barrier();
    poison(L, rank);
    heap.barrier();
    if (s) s = L.run_composition(false);
    heap.barrier();
    if (!s) err = s.to_string();
    else if (err.empty() && read_y(L, rank) != fused) err = "fused differs from unfused";
    heap.barrier();
    return err;
  });
}

// The backward the same way: inputs and dy, the fused backward twice, gradients against fp64, then
// the seven unfused launches from poison. saved: MoeConfig::save_activations -- one fused forward
// first (every rank), whose routing, layout, x rows and h1 the backward reads (five launches).
void run_distributed_backward(int W, int64_t T, int E, int k, Routing routing, bool saved = false) {
  MoeConfig c = moe_config(W, T, 64, 32, E, k, true);
  c.backward = true;
  c.save_activations = saved;
  on_every_rank(c, saved ? "backward (saved activations)" : "backward", [&](int rank, MoeLayer& L, SymmetricHeap& heap) -> std::string {
    MoeHost h{c};
    fill_moe_backward(L, h, 53 + W, routing, rank);
    heap.barrier();
    Status s;
    if (saved) {
      s = L.run_composition(true);
      heap.barrier();
    }
    for (int run = 0; run < 2 && s.is_ok(); ++run) s = L.run_backward_composition(true);
    heap.barrier();
    std::string err = s ? check_moe_backward(L, h, 2e-2, rank) : s.to_string();
    const MoeGradsOut fused = read_grads(L, rank);
    heap.barrier();
    poison_backward(L, rank, saved);
    heap.barrier();
    if (s) s = L.run_backward_composition(false);
    heap.barrier();
    if (!s) err = s.to_string();
    else if (err.empty() && !(read_grads(L, rank) == fused)) err = "fused gradients differ from unfused";
    heap.barrier();
    return err;
  });
}
}  // namespace

TEST(MoeDistributedCpu, OneRankPerProcessProtocol) {
  run_distributed(2, 37, 8, 4, Routing::kUniform);
  run_distributed(4, 20, 16, 8, Routing::kSkewed);
  run_distributed(3, 1, 6, 2, Routing::kSkewedWithDrops);
}

TEST(MoeDistributedCpu, BackwardOneRankPerProcess) {
  run_distributed_backward(2, 37, 8, 4, Routing::kUniform);
  run_distributed_backward(4, 20, 16, 8, Routing::kSkewed);
  run_distributed_backward(3, 1, 6, 2, Routing::kSkewedWithDrops);
}

TEST(MoeDistributedCpu, BackwardWithSavedActivationsOneRankPerProcess) {
  run_distributed_backward(2, 37, 8, 4, Routing::kUniform, true);
  run_distributed_backward(4, 20, 16, 8, Routing::kSkewedWithDrops, true);
  run_distributed_backward(3, 1, 6, 2, Routing::kSkewed, true);
}

// Virtual ranks share one GPU's CTAs (ctas / W each); one process per GPU, every rank has a whole
// GPU's. A distributed rank's tasks must be cut for that: finer than its share of the virtual-rank
// plan (before the eighteenth session both were cut for ctas / W, so at W = 8 a rank's GEMM runs,
// combine and dispatch tasks were sized for 16 of its 132 SMs). TP likewise (TpPlanner's share).
TEST(MoeDistributedCpu, EachRankIsPlannedForAWholeGpu) {
  for (int W : {2, 4}) {
    MoeConfig c = moe_config(W, 512, 64, 32, 32, 8, true);
    c.backward = true;
    std::unique_ptr<MoeLayer> V;
    ASSERT_TRUE(MoeLayer::plan(c, &V).is_ok());
    std::vector<size_t> fwd(W), bwd(W);
    on_every_rank(c, "plan", [&](int rank, MoeLayer& L, SymmetricHeap&) -> std::string {
      fwd[rank] = L.num_tasks(true);
      bwd[rank] = L.num_backward_tasks(true);
      return "";
    });
    for (int r = 0; r < W; ++r) {
      EXPECT_GT(fwd[r], V->num_tasks(true) / W) << "W=" << W << " rank " << r << ": forward";
      EXPECT_GT(bwd[r], V->num_backward_tasks(true) / W) << "W=" << W << " rank " << r << ": backward";
    }
    std::printf("[whole GPU] W=%d: rank 0's tasks %zu forward / %zu backward; virtual plan %zu / %zu for %d ranks\n", W,
                fwd[0], bwd[0], V->num_tasks(true), V->num_backward_tasks(true), W);
  }
}

// MoeConfig::unfused_merge_gemms is a one-process diagnostic: a distributed layer names it an error
// (its merged launch would signal peers' counters that none of its own tasks waits for).
// Every rank plans (the symmetric allocations are collective) and gets the error.
TEST(MoeDistributedCpu, MergedGemmsDiagnosticIsOneProcessOnly) {
  MoeConfig c = moe_config(2, 16, 64, 32, 4, 2, true);
  c.unfused_merge_gemms = true;
  SymmetricHeap heap(2);
  std::vector<std::string> messages(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      std::unique_ptr<MoeLayer> L;
      const Status s = MoeLayer::plan_distributed(c, heap.context(rank), &L);
      messages[rank] = s ? "planned" : s.message();
    });
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(messages[rank].find("unfused_merge_gemms"), std::string::npos) << "rank " << rank << ": " << messages[rank];
}
