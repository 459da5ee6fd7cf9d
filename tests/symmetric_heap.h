// A CPU stand-in for a transport's symmetric memory, for tests of the one-rank-per-process
// protocol with one thread per rank: the i-th alloc on every rank returns the same W blocks.
#pragma once

#include <barrier>
#include <map>
#include <mutex>
#include <vector>

#include "kosmos/distributed.h"

namespace kosmos::test {

// Collective symmetric allocation: the i-th call on every rank returns the same W blocks.
class SymmetricHeap {
 public:
  explicit SymmetricHeap(int world) : world_(world), sync_(world) {}
  Status alloc(int rank, size_t bytes, std::vector<void*>* peers) {
    size_t index;
    {
      std::lock_guard<std::mutex> g(mu_);
      index = next_[rank]++;
      if (blocks_.size() <= index) blocks_.resize(index + 1, std::vector<std::vector<uint8_t>>(world_));
      blocks_[index][rank].assign(bytes + 64, 0);
    }
    sync_.arrive_and_wait();  // everyone allocated this index
    std::lock_guard<std::mutex> g(mu_);
    peers->clear();
    for (int r = 0; r < world_; ++r) {
      KOSMOS_CHECK(blocks_[index][r].size() == bytes + 64, "symmetric alloc: rank ", r, " asked for a different size");
      peers->push_back(blocks_[index][r].data());
    }
    return Status::ok();
  }
  void barrier() { sync_.arrive_and_wait(); }
  DistributedContext context(int rank) {
    DistributedContext d;
    d.rank = rank;
    d.alloc_symmetric = [this, rank](size_t bytes, std::vector<void*>* peers) { return alloc(rank, bytes, peers); };
    d.barrier = [this](cudaStream_t) {
      barrier();
      return Status::ok();
    };
    return d;
  }

 private:
  int world_;
  std::barrier<> sync_;
  std::mutex mu_;
  std::map<int, size_t> next_;
  std::vector<std::vector<std::vector<uint8_t>>> blocks_;
};

}  // namespace kosmos::test
