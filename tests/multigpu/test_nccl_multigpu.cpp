// nccl transport across 2, 4 and 8 GPUs (label multigpu): the ring check of
// tests/gpu/nccl_transport_ring.h — every rank writes rank- and index-encoded words into the next
// rank's buffer through its peer pointer, release-adds the counter there; the next rank
// acquire-waits (10 s timeout) and verifies. Two launch modes (scripts/run_multigpu.sh runs both):
//   SingleProcess.*  one process drives the first W visible GPUs (skips when fewer are visible);
//   EnvLaunch.*      one process per GPU, RANK / WORLD_SIZE / LOCAL_RANK / KOSMOS_NCCL_ID_FILE set
//                    by the launcher (skips when WORLD_SIZE is not set or < 2).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "gpu/nccl_transport_ring.h"
#include "kosmos/transport.h"

namespace kosmos::transport {
namespace {

int visible_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

void single_process_ring(int world) {
  const int n = visible_gpus();
  if (n < world) GTEST_SKIP() << "needs " << world << " GPUs, " << n << " visible";
  std::vector<int> devices(world);
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<std::unique_ptr<NcclTransport>> owned;
  Status s = NcclTransport::create_single_process(devices, &owned);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::vector<NcclTransport*> ts;
  for (auto& t : owned) ts.push_back(t.get());
  std::vector<SymmetricBuffer> bufs;
  s = NcclTransport::alloc_symmetric_all(ts, testing::kRingBytes, &bufs);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(ts[r]->rank(), r);
    ASSERT_EQ(ts[r]->world(), world);
    ASSERT_EQ(bufs[r].peers.size(), size_t(world));
    for (int p = 0; p < world; ++p) ASSERT_NE(bufs[r].peers[p], nullptr) << "rank " << r << " peer " << p;
  }
  EXPECT_TRUE(testing::run_ring(ts, bufs, 3));
  EXPECT_TRUE(NcclTransport::destroy_all(&owned).is_ok());
}

TEST(SingleProcess, Ring2) { single_process_ring(2); }
TEST(SingleProcess, Ring4) { single_process_ring(4); }
TEST(SingleProcess, Ring8) { single_process_ring(8); }

TEST(EnvLaunch, Ring) {
  const char* world_env = std::getenv("WORLD_SIZE");
  if (world_env == nullptr || std::atoi(world_env) < 2) {
    GTEST_SKIP() << "WORLD_SIZE not set (or < 2): launch one process per GPU, see scripts/run_multigpu.sh";
  }
  std::unique_ptr<NcclTransport> t;
  Status s = NcclTransport::create_from_env(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  SymmetricBuffer buf;
  s = t->alloc_symmetric(testing::kRingBytes, &buf);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::printf("[ info ] rank %d/%d on device %d: local %p\n", t->rank(), t->world(), t->device(), buf.local);
  EXPECT_TRUE(testing::run_ring({t.get()}, {buf}, 3));
  // Nobody frees its buffer while a peer might still write into it.
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(t->barrier(stream).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kosmos::transport
