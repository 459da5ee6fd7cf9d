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
void run_distributed(int W, int64_t T, int E, int k, Routing routing) {
  MoeConfig c = moe_config(W, T, 64, 32, E, k, true);
  SymmetricHeap heap(W);
  std::vector<std::string> errors(W);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < W; ++rank)
    ranks.emplace_back([&, rank] {
      std::unique_ptr<MoeLayer> L;
      Status s = MoeLayer::plan_distributed(c, heap.context(rank), &L);
      if (!s) {
        errors[rank] = s.to_string();
        return;
      }
      MoeHost h{c};
      fill_moe(*L, h, 31 + W, routing, rank);
      heap.barrier();  // all inputs written before anyone runs
      for (int run = 0; run < 2 && s.is_ok(); ++run) s = L->run_composition(true);
      heap.barrier();
      std::vector<uint16_t> fused;
      if (s) {
        errors[rank] = check_moe(*L, h, 1e-2, rank);
        fused = read_y(*L, rank);
      }
      heap.barrier();
      poison(*L, rank);
      heap.barrier();
      if (s) s = L->run_composition(false);
      heap.barrier();
      if (!s) errors[rank] = s.to_string();
      else if (errors[rank].empty() && read_y(*L, rank) != fused) errors[rank] = "fused differs from unfused";
      heap.barrier();
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) EXPECT_EQ(errors[r], "") << "W=" << W << " T=" << T << " rank " << r;
}
// The backward the same way: each rank writes its inputs and dy, runs the fused backward twice
// (epochs advance), checks its gradients against fp64, then the unfused seven launches from poison.
void run_distributed_backward(int W, int64_t T, int E, int k, Routing routing) {
  MoeConfig c = moe_config(W, T, 64, 32, E, k, true);
  c.backward = true;
  SymmetricHeap heap(W);
  std::vector<std::string> errors(W);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < W; ++rank)
    ranks.emplace_back([&, rank] {
      std::unique_ptr<MoeLayer> L;
      Status s = MoeLayer::plan_distributed(c, heap.context(rank), &L);
      if (!s) {
        errors[rank] = s.to_string();
        return;
      }
      MoeHost h{c};
      fill_moe_backward(*L, h, 53 + W, routing, rank);
      heap.barrier();
      for (int run = 0; run < 2 && s.is_ok(); ++run) s = L->run_backward_composition(true);
      heap.barrier();
      MoeGradsOut fused;
      if (s) {
        errors[rank] = check_moe_backward(*L, h, 2e-2, rank);
        fused = read_grads(*L, rank);
      }
      heap.barrier();
      poison_backward(*L, rank);
      heap.barrier();
      if (s) s = L->run_backward_composition(false);
      heap.barrier();
      if (!s) errors[rank] = s.to_string();
      else if (errors[rank].empty() && !(read_grads(*L, rank) == fused)) errors[rank] = "fused gradients differ from unfused";
      heap.barrier();
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) EXPECT_EQ(errors[r], "") << "backward W=" << W << " T=" << T << " rank " << r;
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
