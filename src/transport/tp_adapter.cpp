// TpDistributed on top of NcclTransport: symmetric windows and the NCCL barrier.
#include "kosmos/transport.h"

namespace kosmos::transport {

DistributedContext make_distributed(NcclTransport& t) {
  DistributedContext d;
  d.rank = t.rank();
  d.alloc_symmetric = [&t](size_t bytes, std::vector<void*>* peers) -> Status {
    SymmetricBuffer b;
    KOSMOS_RETURN_IF_ERROR(t.alloc_symmetric(bytes, &b));
    *peers = b.peers;
    return Status::ok();
  };
  d.barrier = [&t](cudaStream_t s) { return t.barrier(s); };
  return d;
}

}  // namespace kosmos::transport
