// DistributedContext on top of NcclTransport (symmetric windows, the NCCL barrier) and of
// PeerTransport (cudaMalloc per device, a device-side barrier kernel).
#include "kosmos/transport.h"

namespace kosmos::transport {

namespace {
template <class Transport>
DistributedContext distributed_over(Transport& t) {
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
}  // namespace

DistributedContext make_distributed(NcclTransport& t) { return distributed_over(t); }
DistributedContext make_distributed(PeerTransport& t) { return distributed_over(t); }

}  // namespace kosmos::transport
