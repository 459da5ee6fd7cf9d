// TP ops across real GPUs, one process per GPU (RANK / WORLD_SIZE / LOCAL_RANK / KOSMOS_NCCL_ID_FILE,
// see scripts/run_multigpu.sh). Every op, against fp64, on each rank's own outputs. Skips when
// WORLD_SIZE is unset or fewer GPUs than ranks are visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../moe_check.h"
#include "../tp_check.h"
#include "kosmos/transport.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
// One process per GPU: a failed assertion on one rank would return through the test's destructors,
// whose ncclCommFinalize waits for peers stuck in a barrier this rank never reaches -- every rank
// would sit until the launcher's time limit. So the first fatal failure aborts the communicator and
// ends the process (exit 1); scripts/run_multigpu.sh then stops the other ranks at once.
transport::NcclTransport* g_env_transport = nullptr;

class AbortOnFatalFailure : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.fatally_failed() || g_env_transport == nullptr) return;
    g_env_transport->abort_and_exit("fatal test failure; aborting the communicator and exiting");
  }
};
class FailFastEnvironment : public ::testing::Environment {
  void SetUp() override { ::testing::UnitTest::GetInstance()->listeners().Append(new AbortOnFatalFailure); }
};
[[maybe_unused]] ::testing::Environment* const g_fail_fast = ::testing::AddGlobalTestEnvironment(new FailFastEnvironment);

// The transport of a process launched by scripts/run_multigpu.sh, or null with the reason to skip.
// Fatal failures while it lives end the process (AbortOnFatalFailure).
struct EnvTransportDeleter {
  void operator()(transport::NcclTransport* t) const {
    if (g_env_transport == t) g_env_transport = nullptr;
    delete t;
  }
};
using EnvTransport = std::unique_ptr<transport::NcclTransport, EnvTransportDeleter>;

EnvTransport env_transport(std::string* why) {
  const char* ws = std::getenv("WORLD_SIZE");
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  if (!ws || std::atoi(ws) < 2) {
    *why = "WORLD_SIZE unset or < 2: launch through scripts/run_multigpu.sh";
    return nullptr;
  }
  if (gpus < std::atoi(ws)) {
    *why = "needs " + std::string(ws) + " GPUs, " + std::to_string(gpus) + " visible";
    return nullptr;
  }
  std::unique_ptr<transport::NcclTransport> t;
  Status s = transport::NcclTransport::create_from_env(&t);
  if (!s) {
    ADD_FAILURE() << s.to_string();
    *why = "transport failed";
    return nullptr;
  }
  g_env_transport = t.get();
  return EnvTransport(t.release());
}

// Every multi-GPU TP test's shapes: M, N, K multiples of W with ragged 128-row blocks.
TpConfig multigpu_tp_config(TpOp op, int W) {
  TpConfig c;
  c.op = op;
  c.world = W;
  c.m = 96 * W * 4;
  c.n = 64 * W;
  c.k = 48 * W;
  c.watchdog_seconds = 20;
  return c;
}
}  // namespace

TEST(TpMultiGpu, EveryOpAcrossRanks) {
  std::string why;
  EnvTransport t = env_transport(&why);
  if (!t) GTEST_SKIP() << why;
  Status s;
  const int W = t->world(), rank = t->rank();
  const TpDistributed dist = transport::make_tp_distributed(*t);
  for (TpOp op : {TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr, TpOp::kColParallelBwd, TpOp::kRowParallelBwd}) {
    const TpConfig c = multigpu_tp_config(op, W);
    std::unique_ptr<TpLayer> L;
    s = TpLayer::plan_distributed(c, dist, &L);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << ": " << s.to_string();
    TpHost h{c};
    fill_inputs(*L, h, 9000, rank);
    ASSERT_TRUE(t->barrier(nullptr).is_ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run(nullptr).is_ok());
    s = L->finish(nullptr);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << " rank " << rank << ": " << s.to_string();
    read_outputs(*L, h, rank);
    EXPECT_EQ(check_tp(h, 1e-2, rank), "") << to_string(op) << " rank " << rank;
    ASSERT_TRUE(t->barrier(nullptr).is_ok());
  }
}

TEST(TpMultiGpu, MoeForwardAcrossRanks) {
  std::string why;
  EnvTransport t = env_transport(&why);
  if (!t) GTEST_SKIP() << why;
  Status s;
  const int W = t->world(), rank = t->rank();
  MoeConfig c = moe_config(W, 200, 256, 128, 4 * W, 4, false);
  c.watchdog_seconds = 20;
  std::unique_ptr<MoeLayer> L;
  s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe(*L, h, 77, Routing::kSkewed, rank);
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << "rank " << rank << ": " << s.to_string();
  EXPECT_EQ(check_moe(*L, h, 1e-2, rank), "") << "rank " << rank;
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
}

TEST(TpMultiGpu, MoeBackwardAcrossRanks) {
  std::string why;
  EnvTransport t = env_transport(&why);
  if (!t) GTEST_SKIP() << why;
  Status s;
  const int W = t->world(), rank = t->rank();
  if (W > 8) GTEST_SKIP() << "the MoE backward takes W <= 8 (five GEMM problems per rank in one launch)";
  MoeConfig c = moe_config(W, 200, 256, 128, 4 * W, 4, false);
  c.backward = true;
  c.watchdog_seconds = 20;
  std::unique_ptr<MoeLayer> L;
  s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe_backward(*L, h, 78, Routing::kSkewed, rank);
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run_backward_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << "rank " << rank << ": " << s.to_string();
  EXPECT_EQ(check_moe_backward(*L, h, 2e-2, rank), "") << "rank " << rank;
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
}

// One process driving every visible GPU (up to 8) through the peer transport (plain CUDA peer
// access, no NCCL): each rank's layer is planned and run with its device current, all ranks' runs
// enqueued from this one thread (nothing in run() blocks the host), then each rank checked
// against fp64. Runs in scripts/run_multigpu.sh's single-process mode; skips below 2 GPUs.
namespace {
// A peer-transport group over every visible GPU (up to 8); "" or the reason to skip.
std::string peer_group(std::vector<int>* devices, std::vector<std::unique_ptr<transport::PeerTransport>>* ts) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (n < 2) return "needs 2 GPUs, " + std::to_string(n) + " visible";
  for (int i = 0; i < std::min(n, 8); ++i) devices->push_back(i);
  Status s = transport::PeerTransport::create(*devices, ts);
  if (s.code() == StatusCode::kUnavailable) return s.message();
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return s.is_ok() ? "" : "transport failed";
}

// Runs `body(r)` for every rank with its device current, `reps` times over all ranks (one thread
// enqueues every rank's run: nothing in run() blocks the host).
template <class Body>
void for_every_rank(const std::vector<int>& devices, int reps, Body&& body) {
  for (int i = 0; i < reps; ++i)
    for (size_t r = 0; r < devices.size(); ++r) {
      ASSERT_EQ(cudaSetDevice(devices[r]), cudaSuccess);
      body(int(r));
    }
}
}  // namespace

TEST(SingleProcess, PeerTransportEveryTpOp) {
  std::vector<int> devices;
  std::vector<std::unique_ptr<transport::PeerTransport>> ts;
  const std::string why = peer_group(&devices, &ts);
  if (!why.empty()) GTEST_SKIP() << why;
  const int W = int(devices.size());
  for (TpOp op : {TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr, TpOp::kColParallelBwd, TpOp::kRowParallelBwd}) {
    const TpConfig c = multigpu_tp_config(op, W);
    std::vector<TpDistributed> dist;
    for (auto& t : ts) dist.push_back(transport::make_tp_distributed(*t));
    std::vector<std::unique_ptr<TpLayer>> L(W);
    std::vector<TpHost> h(W, TpHost{c});
    for_every_rank(devices, 1, [&](int r) {
      Status s = TpLayer::plan_distributed(c, dist[r], &L[r]);
      ASSERT_TRUE(s.is_ok()) << to_string(op) << " rank " << r << ": " << s.to_string();
      fill_inputs(*L[r], h[r], 9100, r);
    });
    for_every_rank(devices, 3, [&](int r) { ASSERT_TRUE(L[r]->run(nullptr).is_ok()); });
    for_every_rank(devices, 1, [&](int r) {
      Status s = L[r]->finish(nullptr);
      ASSERT_TRUE(s.is_ok()) << to_string(op) << " rank " << r << ": " << s.to_string();
      read_outputs(*L[r], h[r], r);
      EXPECT_EQ(check_tp(h[r], 1e-2, r), "") << to_string(op) << " rank " << r;
    });
  }
}

TEST(SingleProcess, PeerTransportMoeForward) {
  std::vector<int> devices;
  std::vector<std::unique_ptr<transport::PeerTransport>> ts;
  const std::string why = peer_group(&devices, &ts);
  if (!why.empty()) GTEST_SKIP() << why;
  const int W = int(devices.size());
  MoeConfig c = moe_config(W, 200, 256, 128, 4 * W, 4, false);
  c.watchdog_seconds = 20;
  std::vector<DistributedContext> dist;
  for (auto& t : ts) dist.push_back(transport::make_distributed(*t));
  std::vector<std::unique_ptr<MoeLayer>> L(W);
  std::vector<MoeHost> h(W, MoeHost{c});
  for_every_rank(devices, 1, [&](int r) {
    Status s = MoeLayer::plan_distributed(c, dist[r], &L[r]);
    ASSERT_TRUE(s.is_ok()) << "rank " << r << ": " << s.to_string();
    fill_moe(*L[r], h[r], 79, Routing::kSkewed, r);
  });
  for_every_rank(devices, 3, [&](int r) { ASSERT_TRUE(L[r]->run_composition(true).is_ok()); });
  for_every_rank(devices, 1, [&](int r) {
    Status s = L[r]->finish();
    ASSERT_TRUE(s.is_ok()) << "rank " << r << ": " << s.to_string();
    EXPECT_EQ(check_moe(*L[r], h[r], 1e-2, r), "") << "rank " << r;
  });
}
