// nccl transport on one GPU: a ONE-rank communicator exercises the whole setup path (version
// check, communicator from env vars or passed in, device communicator, symmetric window, peer
// pointer table, put + release-add through the table pointer, acquire-wait, barrier). NCCL 2.28
// refuses two ranks on one GPU, so more ranks are tests/multigpu. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "gpu/nccl_transport_ring.h"
#include "gpu/nccl_transport_test_kernels.h"
#include "kosmos/transport.h"
#include "transport/unique_id_file.h"

namespace kosmos::transport {
namespace {

using testing::kRingBytes;
using testing::kRingWords;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible"

void set_one_rank_env() {
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("LOCAL_RANK", "0", 1);
  ::unsetenv("KOSMOS_NCCL_ID_FILE");
}

// NCCL's flat-VA alias of the window reads what was written through `local`.
void expect_alias_sees(const SymmetricBuffer& buf) {
  uint32_t* out = nullptr;
  void** alias = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&out), kRingWords * 4), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&alias), sizeof(void*)), cudaSuccess);
  testing::launch_read_through_nccl_alias(buf.nccl_window, kRingWords, out, alias, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  uint32_t bad = 0;
  const int rounds_done = 2;  // run_ring below ran 2 rounds: the last one is round 1
  for (uint32_t i = 0; i < kRingWords; ++i) bad += out[i] != testing::encode_word(0, rounds_done - 1, i);
  std::printf("[ info ] local=%p nccl-alias=%p (same memory, second mapping), mismatches via alias: %u\n",
              buf.local, *alias, bad);
  EXPECT_EQ(bad, 0u);
  cudaFreeHost(out);
  cudaFreeHost(alias);
}

TEST(NcclTransportVersion, HeaderMatchesLibrary) {
  std::string warning;
  const Status s = check_nccl_version(&warning);
  std::printf("[ info ] NCCL headers %s, library %s%s%s\n", nccl_header_version().to_string().c_str(),
              nccl_library_version().to_string().c_str(), warning.empty() ? "" : " — ", warning.c_str());
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(NcclTransportIdFile, RoundTripAndTimeout) {
  const std::string path = std::string(::testing::TempDir()) + "kosmos_id_test." + std::to_string(::getpid());
  ncclUniqueId id{}, back{};
  for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = static_cast<char>(i * 7 + 1);
  ASSERT_TRUE(detail::write_id_file(path, &id, sizeof id).is_ok());
  ASSERT_TRUE(detail::read_id_file(path, &back, sizeof back, 1.0, 1).is_ok());
  EXPECT_EQ(std::memcmp(&id, &back, sizeof id), 0);
  std::remove(path.c_str());
  const Status late = detail::read_id_file(path, &back, sizeof back, 0.2, 3);
  EXPECT_EQ(late.code(), StatusCode::kTimeout);
  EXPECT_NE(late.message().find("rank 3"), std::string::npos) << late.message();
}

TEST(NcclTransportOneRank, FromEnv) {
  SKIP_WITHOUT_GPU();
  set_one_rank_env();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<NcclTransport> t;
  Status s = NcclTransport::create_from_env(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(t->rank(), 0);
  EXPECT_EQ(t->world(), 1);
  EXPECT_EQ(t->device(), 0);
  EXPECT_NE(t->nccl_dev_comm(), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");

  SymmetricBuffer buf;
  s = t->alloc_symmetric(kRingBytes, &buf);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_EQ(buf.peers.size(), 1u);
  EXPECT_EQ(buf.peers[0], buf.local);
  EXPECT_EQ(buf.bytes, kRingBytes);
  EXPECT_NE(buf.nccl_window, nullptr);
  std::printf("[ info ] create_from_env %.1f ms, alloc_symmetric(%zu B) %.1f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(), kRingBytes,
              std::chrono::duration<double, std::milli>(t2 - t1).count());

  EXPECT_TRUE(testing::run_ring({t.get()}, {buf}, 2));
  expect_alias_sees(buf);

  // Host barrier latency (one rank: NCCL's allreduce launch path only).
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(t->barrier(stream).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const int iters = 200;
  const auto b0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) ASSERT_TRUE(t->barrier(stream).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const auto b1 = std::chrono::steady_clock::now();
  std::printf("[ info ] barrier: %.2f us each (%d back to back, 1 rank)\n",
              std::chrono::duration<double, std::micro>(b1 - b0).count() / iters, iters);
  cudaStreamDestroy(stream);

  // A second buffer, freed explicitly; the first one is freed by the destructor.
  SymmetricBuffer second;
  ASSERT_TRUE(t->alloc_symmetric(4096, &second).is_ok());
  EXPECT_NE(second.local, buf.local);
  EXPECT_TRUE(t->free_symmetric(&second).is_ok());
  EXPECT_EQ(second.local, nullptr);
  EXPECT_FALSE(t->free_symmetric(&second).is_ok());
  t.reset();
}

TEST(NcclTransportOneRank, WithPassedComm) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  {
    std::unique_ptr<NcclTransport> t;
    Status s = NcclTransport::create_with_comm(comm, &t);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(t->nccl_comm(), static_cast<void*>(comm));
    SymmetricBuffer buf;
    s = t->alloc_symmetric(kRingBytes, &buf);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    ASSERT_EQ(buf.peers.size(), 1u);
    EXPECT_EQ(buf.peers[0], buf.local);
    EXPECT_TRUE(testing::run_ring({t.get()}, {buf}, 3));
  }
  // The transport did not own the communicator: it still works.
  int* x = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int)), cudaSuccess);
  EXPECT_EQ(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(x);
  EXPECT_EQ(ncclCommFinalize(comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclTransportOneRank, SingleProcessOneDevice) {
  SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<NcclTransport>> ts;
  Status s = NcclTransport::create_single_process({0}, &ts);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_EQ(ts.size(), 1u);
  std::vector<SymmetricBuffer> bufs;
  s = NcclTransport::alloc_symmetric_all({ts[0].get()}, kRingBytes, &bufs);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(testing::run_ring({ts[0].get()}, bufs, 2));
  EXPECT_TRUE(NcclTransport::destroy_all(&ts).is_ok());
  EXPECT_TRUE(ts.empty());
}

TEST(NcclTransportErrors, BadEnvironment) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclTransport> t;
  set_one_rank_env();
  ::unsetenv("RANK");
  Status s = NcclTransport::create_from_env(&t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("RANK"), std::string::npos) << s.message();

  set_one_rank_env();
  ::setenv("WORLD_SIZE", "2", 1);
  s = NcclTransport::create_from_env(&t);
  EXPECT_NE(s.message().find("KOSMOS_NCCL_ID_FILE"), std::string::npos) << s.message();

  set_one_rank_env();
  ::setenv("LOCAL_RANK", "99", 1);
  s = NcclTransport::create_from_env(&t);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();

  set_one_rank_env();
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);
  s = NcclTransport::create_from_env(&t);
  EXPECT_NE(s.message().find("NCCL_NVLS_ENABLE"), std::string::npos) << s.message();
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);

  std::vector<std::unique_ptr<NcclTransport>> ts;
  s = NcclTransport::create_single_process({0, 0}, &ts);
  EXPECT_FALSE(s.is_ok());
  std::printf("[ info ] duplicate device: %s\n", s.to_string().c_str());
  EXPECT_FALSE(t);
}

}  // namespace
}  // namespace kosmos::transport
