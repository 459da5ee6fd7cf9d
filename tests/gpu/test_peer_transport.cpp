// The peer transport (one process, plain CUDA peer access, no NCCL) on one GPU: argument errors,
// then every TP op and the MoE forward over a one-rank group (symmetric buffers from cudaMalloc,
// .sys-scope counters, the device-side barrier before each launch), against fp64. Several GPUs:
// tests/multigpu/test_tp_multigpu.cpp (SingleProcess.PeerTransport*).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>

#include "gpu_skip.h"
#include "one_rank_checks.h"
#include "kosmos/transport.h"

using namespace kosmos;
using namespace kosmos::test;

TEST(PeerTransportErrors, BadDeviceListsNamed) {
  SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<transport::PeerTransport>> ts;
  Status s = transport::PeerTransport::create({}, &ts);
  EXPECT_NE(s.message().find("no devices"), std::string::npos) << s.message();
  s = transport::PeerTransport::create({0, 0}, &ts);
  EXPECT_NE(s.message().find("device 0 appears twice"), std::string::npos) << s.message();
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  s = transport::PeerTransport::create({0, n}, &ts);
  EXPECT_NE(s.message().find("device " + std::to_string(n) + " does not exist"), std::string::npos) << s.message();
  EXPECT_TRUE(ts.empty());
}

TEST(PeerTransportOneDevice, SymmetricBuffersMatchAcrossCalls) {
  SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<transport::PeerTransport>> ts;
  ASSERT_TRUE(transport::PeerTransport::create({0}, &ts).is_ok());
  transport::SymmetricBuffer a, b;
  ASSERT_TRUE(ts[0]->alloc_symmetric(4096, &a).is_ok());
  ASSERT_TRUE(ts[0]->alloc_symmetric(256, &b).is_ok());
  ASSERT_EQ(a.peers.size(), 1u);
  EXPECT_EQ(a.local, a.peers[0]);
  EXPECT_NE(a.local, b.local);
  std::vector<unsigned char> host(4096, 0xFF);
  ASSERT_EQ(cudaMemcpy(host.data(), a.local, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (unsigned char c : host) ASSERT_EQ(c, 0) << "symmetric buffers start zeroed (counters live in them)";
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ts[0]->barrier(nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(PeerTransportOneDevice, EveryTpOpAndMoeForward) {
  SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<transport::PeerTransport>> ts;
  Status s = transport::PeerTransport::create({0}, &ts);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_every_tp_op_one_rank(transport::make_tp_distributed(*ts[0]), 4343);
  expect_moe_forward_one_rank(transport::make_distributed(*ts[0]), 98);
}
