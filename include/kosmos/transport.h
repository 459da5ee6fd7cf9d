// kosmos::transport — host side of the multi-GPU transport for the fused tensor-parallel ops.
//
// What it gives the runtime: for every symmetric buffer, a table of plain device pointers
// `peers[r]` (rank r's copy of the buffer, as addressable from THIS rank's GPU). The persistent
// kernel copies them into its `buffers[buffer_id * world + rank]` table and from then on only does
// ordinary loads/stores/atomics on them (e.g. `red.release.sys.global.add.u64` on a peer counter);
// no NCCL device function runs in the hot path.
//
// Backend: NCCL 2.28 symmetric memory ("LSA" = load/store accessible peers, i.e. NVLink / same
// node): ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC); the peer pointers are read
// once per buffer by a one-thread setup kernel (ncclGetLsaPointer), because NCCL 2.28.9 has no
// host-side query for them (ncclGetLsaDevicePointer appears in 2.29). Multicast/NVLS is never used.
//
// NOTE: no NCCL type appears here (ncclComm_t travels as void*), so users of this header need
// neither nccl.h nor NCCL's include path; the NCCL version is pinned in one place (src/transport).
//
// Collectives. Creation, alloc_symmetric and barrier are collective over the communicator: every
// rank must call them, in the same order. With one process per GPU each process calls the
// member functions. With one process driving several GPUs, a sequential loop over ranks would
// deadlock (rank 0 waits inside NCCL for rank 1); use the *_all functions, which wrap the per-rank
// calls in ncclGroupStart/End.
//
// Lifetime. NcclTransport owns (RAII) its device communicator, every buffer it allocated
// (window + ncclMemAlloc memory) and, when it created it, the ncclComm_t. Destruction is local
// for buffers, so call barrier() first when peers might still write into them; for an owned
// communicator it is an intra-node collective (ncclCommFinalize + ncclCommDestroy): destroy all
// ranks' transports, in one process use destroy_all(). All setup (create, alloc) must happen
// before a never-ending persistent kernel is launched: NCCL setup maps memory and may
// synchronize the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kosmos/status.h"

namespace kosmos::transport {

// One symmetric buffer: the same size on every rank, reachable by every rank's GPU.
struct SymmetricBuffer {
  void* local = nullptr;     // this rank's memory (the ncclMemAlloc address)
  std::vector<void*> peers;  // peers[r]: rank r's memory, mapped for this rank's GPU;
                             // peers[rank()] == local, peers.size() == world()
  size_t bytes = 0;          // usable size (as requested); same on every rank
  // ncclWindow_t (a device pointer) for kernels that also want NCCL's device API
  // (ncclGetLsaPointer, ncclSymPtr). Not needed for the plain-pointer path.
  void* nccl_window = nullptr;
};

struct NcclVersion {
  int major = 0, minor = 0, patch = 0;
  std::string to_string() const;
};
NcclVersion nccl_header_version();   // NCCL_VERSION_CODE of the headers we compiled against
NcclVersion nccl_library_version();  // ncclGetVersion() of the libnccl actually loaded

// Header vs library: error (kUnavailable) when major.minor differ — NCCL 2.28 device structs are
// not versioned, so a 2.28 build must run on a 2.28 library. A patch difference is allowed but
// described in *warning (and printed to stderr when warning == nullptr).
Status check_nccl_version(std::string* warning = nullptr);

class NcclTransport {
 public:
  // One process per GPU. Reads RANK, WORLD_SIZE, LOCAL_RANK (default: RANK) and, when
  // WORLD_SIZE > 1, KOSMOS_NCCL_ID_FILE: rank 0 writes the ncclUniqueId there (temp file + rename),
  // the others poll for it for KOSMOS_NCCL_ID_TIMEOUT_S seconds (default 120). Rank 0 deletes the
  // file once every rank has joined. NOTE: give every launch its own path (mktemp): a stale file
  // from an earlier launch would hand the other ranks a dead id. Uses device LOCAL_RANK.
  // Sets NCCL_NVLS_ENABLE=0 when unset; refuses to run when it is set to anything else.
  static Status create_from_env(std::unique_ptr<NcclTransport>* out);

  // Wraps a communicator the caller made (e.g. PyTorch's); does not own it. nccl_comm is an
  // ncclComm_t. Collective: every rank of the communicator calls it.
  static Status create_with_comm(void* nccl_comm, std::unique_ptr<NcclTransport>* out);
  // Same for several communicators driven by this one thread (one per local GPU).
  static Status create_with_comms(const std::vector<void*>& nccl_comms,
                                  std::vector<std::unique_ptr<NcclTransport>>* out);

  // One process, all ranks: rank i drives devices[i] (ncclCommInitAll). Owns the communicators.
  static Status create_single_process(const std::vector<int>& devices,
                                      std::vector<std::unique_ptr<NcclTransport>>* out);

  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;
  ~NcclTransport();

  int rank() const { return rank_; }
  int world() const { return world_; }
  int device() const { return device_; }
  void* nccl_comm() const { return comm_; }  // ncclComm_t
  // Points at the ncclDevComm made at creation (lsaMultimem = false, lsa_barrier_count() LSA
  // barriers), for kernels that want ncclLsaBarrierSession. Cast to `const ncclDevComm*`.
  const void* nccl_dev_comm() const;
  static constexpr int lsa_barrier_count() { return kLsaBarrierCount; }

  // Collective. Allocates `bytes` (> 0) on this rank, registers it as a symmetric window and
  // fills out->peers. The transport keeps ownership; the SymmetricBuffer stays valid until
  // free_symmetric(out) or the transport's destruction.
  Status alloc_symmetric(size_t bytes, SymmetricBuffer* out);
  // One thread, several ranks: (*out)[i] belongs to transports[i].
  static Status alloc_symmetric_all(const std::vector<NcclTransport*>& transports, size_t bytes,
                                    std::vector<SymmetricBuffer>* out);
  // Local: deregisters and frees. Barrier first if peers may still access the buffer.
  Status free_symmetric(SymmetricBuffer* buffer);

  // Collective: returns on `stream` once every rank has enqueued its barrier and reached it
  // (an ncclAllReduce of one int). For benchmarks and setup, not the hot path.
  Status barrier(cudaStream_t stream);
  static Status barrier_all(const std::vector<NcclTransport*>& transports,
                            const std::vector<cudaStream_t>& streams);

  // After an error on this rank: ncclCommAbort of an owned communicator (no collective, no wait
  // for the peers, which ncclCommFinalize would do: they may be stuck in a collective this rank
  // never joins) and nothing else; the process is expected to exit without running destructors
  // that free device memory (std::_Exit), since a cudaFree waits for the whole device. The
  // destructor then does nothing. Not collective.
  Status abort();
  // The fail-fast end of a rank (benchmarks, multi-GPU tests): prints "kosmos: rank R of W: message"
  // to stderr, abort(), flushes and std::_Exit(1) -- no destructors.
  [[noreturn]] void abort_and_exit(const std::string& message);

  // Destroys transports made by create_single_process / create_with_comms in one go (grouped
  // ncclCommFinalize for owned communicators, then local destruction). Clears *transports.
  static Status destroy_all(std::vector<std::unique_ptr<NcclTransport>>* transports);

 private:
  static constexpr int kLsaBarrierCount = 1;
  struct Allocation;
  struct DevComm;

  NcclTransport();
  static Status finish_init(const std::vector<NcclTransport*>& transports);
  Status release_local();
  Status release_all();

  void* comm_ = nullptr;  // ncclComm_t
  bool owns_comm_ = false;
  bool finalized_ = false;
  bool init_done_ = false;  // false: an owned communicator is aborted, not finalized, on release
  int rank_ = 0, world_ = 0, device_ = -1;
  std::unique_ptr<DevComm> dev_comm_;
  int* barrier_scratch_ = nullptr;  // one int on device_, the allreduce operand
  std::vector<std::unique_ptr<Allocation>> allocations_;
};

}  // namespace kosmos::transport

#include "kosmos/tp.h"

namespace kosmos::transport {
// One process, several GPUs of one node, plain CUDA peer access (no NCCL): rank i drives
// devices[i]. Symmetric buffers are cudaMalloc'd (zeroed) on every device, and peers[r] is rank r's
// device pointer, addressable from every other device once peer access is enabled (UVA); the
// kernels signal at .sys scope, as over NCCL. Usage, per rank: cudaSetDevice(t.device()), then
// plan_distributed(cfg, make_distributed(t), ...), and run() with a stream of that device. One
// thread may drive all ranks (a loop of run() calls: nothing blocks the host) or one thread each.
// Every rank must call alloc_symmetric with the same sizes in the same order: the first rank to make
// its k-th call allocates buffer k on every device, the others get the same pointers.
// barrier(stream) enqueues a one-thread kernel that adds 1 to every rank's barrier counter
// (red.release.sys) once the stream's earlier work is done, and spins until its own counter holds
// world x (its barrier count): so a run after the barrier starts only when every rank has finished
// what it enqueued before its own barrier. It stops waiting after timeout_s (then the op's watchdog
// names the missing peer).
class PeerTransport {
 public:
  // Errors (nothing allocated): no devices, an invalid or repeated device id (one rank per GPU;
  // virtual ranks on one GPU need no transport), or a pair of devices without peer access.
  static Status create(const std::vector<int>& devices, std::vector<std::unique_ptr<PeerTransport>>* out,
                       double barrier_timeout_s = 30.0);
  PeerTransport(const PeerTransport&) = delete;
  PeerTransport& operator=(const PeerTransport&) = delete;
  ~PeerTransport();  // the buffers are freed with the last transport of the group

  int rank() const { return rank_; }
  int world() const;
  int device() const;
  Status alloc_symmetric(size_t bytes, SymmetricBuffer* out);
  Status barrier(cudaStream_t stream);

 private:
  struct Group;
  PeerTransport(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  std::shared_ptr<Group> group_;
  int rank_ = 0;
  size_t allocs_ = 0;        // alloc_symmetric calls made by this rank
  uint64_t generation_ = 0;  // barrier calls made by this rank
};

// Adapter: lets TpLayer / MoeLayer ::plan_distributed allocate symmetric buffers and barrier
// through `t` (which must outlive the layer; the buffers are freed when `t` is destroyed).
DistributedContext make_distributed(NcclTransport& t);
DistributedContext make_distributed(PeerTransport& t);
inline TpDistributed make_tp_distributed(NcclTransport& t) { return make_distributed(t); }
inline TpDistributed make_tp_distributed(PeerTransport& t) { return make_distributed(t); }
}  // namespace kosmos::transport
