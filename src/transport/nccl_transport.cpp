// NcclTransport: communicator setup, symmetric buffers and host barrier over NCCL 2.28.
// See include/kosmos/transport.h for the contract; the NCCL facts this file relies on:
// - ncclCommWindowRegister / ncclDevCommCreate are collective and group-aware (one thread driving
//   several ranks must wrap them in ncclGroupStart/End); window deregistration is local.
// - ncclCommWindowRegister "succeeds" with a plain local registration when the communicator has no
//   symmetric-memory support (needs all ranks CUDA-P2P reachable, NCCL_WIN_ENABLE, cuMem); only
//   ncclDevCommCreate reports it. So every transport creates one ncclDevComm at start-up.
// - The LSA team ("load/store accessible") is a run of node-contiguous ranks; host ncclTeamLsa()
//   reports it without any communication. The transport serves a world only if LSA == world.
#include "kosmos/transport.h"

#include <nccl.h>
#include <nccl_device.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "kosmos/cuda_check.h"
#include "transport/lsa_pointers.h"
#include "transport/nccl_check.h"
#include "transport/unique_id_file.h"

namespace kosmos::transport {

struct NcclTransport::Allocation {
  void* ptr = nullptr;            // ncclMemAlloc
  ncclWindow_t window = nullptr;  // ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)
  size_t bytes = 0;
};

struct NcclTransport::DevComm {
  ncclDevComm dev_comm{};
  bool created = false;
};

namespace {

NcclVersion decode_version(int code) {
  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  NcclVersion v;
  if (code >= 10000) {
    v.major = code / 10000;
    v.minor = (code / 100) % 100;
  } else {
    v.major = code / 1000;
    v.minor = (code / 100) % 10;
  }
  v.patch = code % 100;
  return v;
}

// NCCL_NVLS_ENABLE: kosmos never uses NVLink multicast (no cuMulticastCreate, lsaMultimem=false).
// When we create the communicator we also keep NCCL's own collectives off NVLS.
Status ensure_nvls_off(bool may_set) {
  const char* value = std::getenv("NCCL_NVLS_ENABLE");
  if (value == nullptr) {
    if (may_set) ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    return Status::ok();
  }
  KOSMOS_CHECK(std::strcmp(value, "0") == 0, "NCCL_NVLS_ENABLE=", value,
               ": kosmos never uses NVLink multicast (NVLS) and requires NCCL_NVLS_ENABLE=0 (or unset, "
               "then kosmos sets it to 0 for the communicators it creates)");
  return Status::ok();
}

Status env_int(const char* name, bool required, int fallback, int* out) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    KOSMOS_CHECK(!required, "environment variable ", name,
                 " is not set (one process per GPU needs RANK, WORLD_SIZE and optionally LOCAL_RANK)");
    *out = fallback;
    return Status::ok();
  }
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  KOSMOS_CHECK(end != value && *end == '\0' && parsed >= 0 && parsed < (1L << 30), "environment variable ",
               name, "='", value, "' is not a non-negative integer");
  *out = static_cast<int>(parsed);
  return Status::ok();
}

// Runs fn(i) for every i inside one ncclGroupStart/End; the group is always closed, the first
// error wins.
template <class Fn>
Status in_group(size_t count, Fn&& fn) {
  KOSMOS_NCCL_CHECK(ncclGroupStart());
  Status first;
  for (size_t i = 0; i < count && first.is_ok(); ++i) first = fn(i);
  const ncclResult_t end = ncclGroupEnd();
  KOSMOS_RETURN_IF_ERROR(first);
  KOSMOS_NCCL_CHECK(end);
  return Status::ok();
}

Status set_device(int device) {
  KOSMOS_CUDA_CHECK(cudaSetDevice(device));
  return Status::ok();
}

}  // namespace

std::string NcclVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

NcclVersion nccl_header_version() { return decode_version(NCCL_VERSION_CODE); }

NcclVersion nccl_library_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return {};
  return decode_version(code);
}

Status check_nccl_version(std::string* warning) {
  int code = 0;
  KOSMOS_NCCL_CHECK(ncclGetVersion(&code));
  const NcclVersion lib = decode_version(code);
  const NcclVersion hdr = nccl_header_version();
  KOSMOS_CHECK_CODE(lib.major == hdr.major && lib.minor == hdr.minor, StatusCode::kUnavailable,
                    "libnccl ", lib.to_string(), " is loaded but kosmos was built against NCCL ",
                    hdr.to_string(), " headers; the NCCL 2.28 device structs are unversioned, so the "
                    "major.minor must match: point LD_LIBRARY_PATH at a libnccl ", hdr.major, ".", hdr.minor,
                    ".x (e.g. the nvidia-nccl wheel's lib/ folder) or rebuild against the loaded one");
  if (lib.patch != hdr.patch) {
    const std::string text = kosmos::detail::concat("kosmos: warning: libnccl ", lib.to_string(),
                                            " is loaded, kosmos was built against NCCL ", hdr.to_string(),
                                            " headers (patch differs)");
    if (warning != nullptr) {
      *warning = text;
    } else {
      std::fprintf(stderr, "%s\n", text.c_str());
    }
  } else if (warning != nullptr) {
    warning->clear();
  }
  return Status::ok();
}

NcclTransport::NcclTransport() : dev_comm_(std::make_unique<DevComm>()) {}

NcclTransport::~NcclTransport() {
  const Status s = release_all();
  if (!s.is_ok()) std::fprintf(stderr, "kosmos: ~NcclTransport (rank %d): %s\n", rank_, s.to_string().c_str());
}

const void* NcclTransport::nccl_dev_comm() const {
  return dev_comm_->created ? &dev_comm_->dev_comm : nullptr;
}

Status NcclTransport::create_from_env(std::unique_ptr<NcclTransport>* out) {
  KOSMOS_CHECK(out != nullptr, "create_from_env: out is null");
  KOSMOS_RETURN_IF_ERROR(check_nccl_version());
  KOSMOS_RETURN_IF_ERROR(ensure_nvls_off(/*may_set=*/true));
  int rank = 0, world = 0, local_rank = 0, timeout_s = 0;
  KOSMOS_RETURN_IF_ERROR(env_int("RANK", true, 0, &rank));
  KOSMOS_RETURN_IF_ERROR(env_int("WORLD_SIZE", true, 0, &world));
  KOSMOS_RETURN_IF_ERROR(env_int("LOCAL_RANK", false, rank, &local_rank));
  KOSMOS_RETURN_IF_ERROR(env_int("KOSMOS_NCCL_ID_TIMEOUT_S", false, 120, &timeout_s));
  KOSMOS_CHECK(world >= 1 && rank < world, "RANK=", rank, " WORLD_SIZE=", world, ": need 0 <= RANK < WORLD_SIZE");
  int num_devices = 0;
  KOSMOS_CUDA_CHECK(cudaGetDeviceCount(&num_devices));
  KOSMOS_CHECK_CODE(local_rank < num_devices, StatusCode::kUnavailable, "LOCAL_RANK=", local_rank, " but only ",
                    num_devices, " GPU(s) are visible to rank ", rank, " (one process per GPU)");
  KOSMOS_RETURN_IF_ERROR(set_device(local_rank));

  ncclUniqueId id{};
  std::string id_path;
  if (world == 1) {
    KOSMOS_NCCL_CHECK(ncclGetUniqueId(&id));
  } else {
    const char* path = std::getenv("KOSMOS_NCCL_ID_FILE");
    KOSMOS_CHECK(path != nullptr && *path != '\0', "WORLD_SIZE=", world,
                 " needs KOSMOS_NCCL_ID_FILE: a fresh path on a filesystem all ranks share (rank 0 writes "
                 "the NCCL unique id there)");
    id_path = path;
    if (rank == 0) {
      KOSMOS_NCCL_CHECK(ncclGetUniqueId(&id));
      KOSMOS_RETURN_IF_ERROR(detail::write_id_file(id_path, &id, sizeof id));
    } else {
      KOSMOS_RETURN_IF_ERROR(detail::read_id_file(id_path, &id, sizeof id, timeout_s, rank));
    }
  }
  ncclComm_t comm = nullptr;
  KOSMOS_NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank));
  // Every rank has joined (init is collective): the id file has served its purpose.
  if (rank == 0 && !id_path.empty()) std::remove(id_path.c_str());

  std::unique_ptr<NcclTransport> t(new NcclTransport());
  t->comm_ = comm;
  t->owns_comm_ = true;
  KOSMOS_RETURN_IF_ERROR(finish_init({t.get()}));
  *out = std::move(t);
  return Status::ok();
}

Status NcclTransport::create_with_comm(void* nccl_comm, std::unique_ptr<NcclTransport>* out) {
  KOSMOS_CHECK(out != nullptr, "create_with_comm: out is null");
  std::vector<std::unique_ptr<NcclTransport>> made;
  KOSMOS_RETURN_IF_ERROR(create_with_comms({nccl_comm}, &made));
  *out = std::move(made[0]);
  return Status::ok();
}

Status NcclTransport::create_with_comms(const std::vector<void*>& nccl_comms,
                                        std::vector<std::unique_ptr<NcclTransport>>* out) {
  KOSMOS_CHECK(out != nullptr && !nccl_comms.empty(), "create_with_comms: no communicator given");
  KOSMOS_RETURN_IF_ERROR(check_nccl_version());
  KOSMOS_RETURN_IF_ERROR(ensure_nvls_off(/*may_set=*/false));
  std::vector<std::unique_ptr<NcclTransport>> made;
  std::vector<NcclTransport*> raw;
  for (void* comm : nccl_comms) {
    KOSMOS_CHECK(comm != nullptr, "create_with_comms: null ncclComm_t");
    made.emplace_back(new NcclTransport());
    made.back()->comm_ = comm;
    raw.push_back(made.back().get());
  }
  KOSMOS_RETURN_IF_ERROR(finish_init(raw));
  *out = std::move(made);
  return Status::ok();
}

Status NcclTransport::create_single_process(const std::vector<int>& devices,
                                            std::vector<std::unique_ptr<NcclTransport>>* out) {
  KOSMOS_CHECK(out != nullptr && !devices.empty(), "create_single_process: no device given");
  KOSMOS_RETURN_IF_ERROR(check_nccl_version());
  KOSMOS_RETURN_IF_ERROR(ensure_nvls_off(/*may_set=*/true));
  int num_devices = 0;
  KOSMOS_CUDA_CHECK(cudaGetDeviceCount(&num_devices));
  std::set<int> seen;
  for (int d : devices) {
    KOSMOS_CHECK_CODE(d >= 0 && d < num_devices, StatusCode::kUnavailable, "device ", d,
                      " requested but only ", num_devices, " GPU(s) are visible");
    KOSMOS_CHECK(seen.insert(d).second, "device ", d,
                 " listed twice: NCCL 2.28 refuses two ranks on one GPU (use the virtual-rank transport)");
  }
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  KOSMOS_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<NcclTransport>> made;
  std::vector<NcclTransport*> raw;
  for (ncclComm_t comm : comms) {
    made.emplace_back(new NcclTransport());
    made.back()->comm_ = comm;
    made.back()->owns_comm_ = true;
    raw.push_back(made.back().get());
  }
  KOSMOS_RETURN_IF_ERROR(finish_init(raw));
  *out = std::move(made);
  return Status::ok();
}

// Identity, world-size check, barrier scratch, and the (grouped, collective) ncclDevCommCreate.
Status NcclTransport::finish_init(const std::vector<NcclTransport*>& transports) {
  for (NcclTransport* t : transports) {
    ncclComm_t comm = static_cast<ncclComm_t>(t->comm_);
    KOSMOS_NCCL_CHECK(ncclCommCount(comm, &t->world_));
    KOSMOS_NCCL_CHECK(ncclCommUserRank(comm, &t->rank_));
    KOSMOS_NCCL_CHECK(ncclCommCuDevice(comm, &t->device_));
    const ncclTeam_t lsa = ncclTeamLsa(comm);  // host query, no communication
    KOSMOS_CHECK_CODE(lsa.nRanks == t->world_ && lsa.rank == t->rank_, StatusCode::kUnavailable,
                      "the nccl transport needs every rank reachable by load/store (one NVLink node), but "
                      "rank ", t->rank_, " of world ", t->world_, " sees an LSA team of ", lsa.nRanks,
                      " rank(s)", (lsa.nRanks == 0 ? " (NCCL symmetric-memory init failed)" : ""),
                      "; multi-node needs a GIN backend (not implemented). Number ranks node-contiguously.");
    KOSMOS_RETURN_IF_ERROR(set_device(t->device_));
    KOSMOS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&t->barrier_scratch_), sizeof(int)));
    KOSMOS_CUDA_CHECK(cudaMemset(t->barrier_scratch_, 0, sizeof(int)));
  }
  Status s = in_group(transports.size(), [&](size_t i) -> Status {
    NcclTransport* t = transports[i];
    ncclDevCommRequirements reqs;
    std::memset(&reqs, 0, sizeof reqs);  // NCCL 2.28: plain struct (2.29+: use the initializer macro)
    reqs.lsaMultimem = false;            // never NVLS
    reqs.lsaBarrierCount = kLsaBarrierCount;
    KOSMOS_NCCL_CHECK(ncclDevCommCreate(static_cast<ncclComm_t>(t->comm_), &reqs, &t->dev_comm_->dev_comm));
    return Status::ok();
  });
  if (!s.is_ok()) {
    return Status(s.code(), s.message() + " — ncclDevCommCreate fails when the communicator has no symmetric-"
                                          "memory support: all ranks must be CUDA-P2P reachable, with "
                                          "NCCL_WIN_ENABLE=1 and NCCL_CUMEM_ENABLE=1 (defaults)");
  }
  for (NcclTransport* t : transports) {
    t->dev_comm_->created = true;
    t->init_done_ = true;
    const ncclDevComm& dc = t->dev_comm_->dev_comm;
    KOSMOS_CHECK_CODE(dc.lsaSize == t->world_ && dc.lsaRank == t->rank_ && dc.nRanks == t->world_,
                      StatusCode::kInternal, "ncclDevComm reports rank ", dc.rank, "/", dc.nRanks, " lsa ",
                      dc.lsaRank, "/", dc.lsaSize, ", expected ", t->rank_, "/", t->world_);
  }
  return Status::ok();
}

Status NcclTransport::alloc_symmetric(size_t bytes, SymmetricBuffer* out) {
  KOSMOS_CHECK(out != nullptr, "alloc_symmetric: out is null");
  std::vector<SymmetricBuffer> made;
  KOSMOS_RETURN_IF_ERROR(alloc_symmetric_all({this}, bytes, &made));
  *out = std::move(made[0]);
  return Status::ok();
}

Status NcclTransport::alloc_symmetric_all(const std::vector<NcclTransport*>& transports, size_t bytes,
                                          std::vector<SymmetricBuffer>* out) {
  KOSMOS_CHECK(out != nullptr && !transports.empty(), "alloc_symmetric_all: no transport given");
  KOSMOS_CHECK(bytes > 0, "alloc_symmetric: bytes must be > 0");
  std::vector<Allocation*> allocs;
  for (NcclTransport* t : transports) {
    KOSMOS_CHECK(t != nullptr, "alloc_symmetric_all: null transport");
    KOSMOS_RETURN_IF_ERROR(set_device(t->device_));
    auto a = std::make_unique<Allocation>();
    a->bytes = bytes;
    KOSMOS_NCCL_CHECK(ncclMemAlloc(&a->ptr, bytes));  // cuMem allocation, granularity-rounded
    allocs.push_back(a.get());
    t->allocations_.push_back(std::move(a));  // owned from here on, even if a later step fails
  }
  KOSMOS_RETURN_IF_ERROR(in_group(transports.size(), [&](size_t i) -> Status {
    KOSMOS_NCCL_CHECK(ncclCommWindowRegister(static_cast<ncclComm_t>(transports[i]->comm_), allocs[i]->ptr,
                                             bytes, &allocs[i]->window, NCCL_WIN_COLL_SYMMETRIC));
    return Status::ok();
  }));
  std::vector<SymmetricBuffer> made(transports.size());
  for (size_t i = 0; i < transports.size(); ++i) {
    NcclTransport* t = transports[i];
    KOSMOS_RETURN_IF_ERROR(set_device(t->device_));
    cudaStream_t stream = nullptr;
    KOSMOS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void* self_alias = nullptr;
    const Status s = detail::read_lsa_pointers(allocs[i]->window, t->world_, stream, &made[i].peers, &self_alias);
    KOSMOS_CUDA_CHECK(cudaStreamDestroy(stream));
    KOSMOS_RETURN_IF_ERROR(s);
    for (int r = 0; r < t->world_; ++r) {
      KOSMOS_CHECK_CODE(made[i].peers[r] != nullptr, StatusCode::kInternal, "NCCL gave no LSA pointer for rank ",
                        r, " on rank ", t->rank_);
    }
    // NOTE: NCCL's own view of this rank (self_alias, == peers[rank] as computed) is a second
    // mapping of the same physical memory in NCCL's flat VA range; we hand out the ncclMemAlloc
    // address instead, which NCCL collectives and TMA descriptors built on `local` also use.
    (void)self_alias;
    made[i].peers[t->rank_] = allocs[i]->ptr;
    made[i].local = allocs[i]->ptr;
    made[i].bytes = bytes;
    made[i].nccl_window = allocs[i]->window;
  }
  *out = std::move(made);
  return Status::ok();
}

Status NcclTransport::free_symmetric(SymmetricBuffer* buffer) {
  KOSMOS_CHECK(buffer != nullptr, "free_symmetric: buffer is null");
  for (auto it = allocations_.begin(); it != allocations_.end(); ++it) {
    if ((*it)->ptr != buffer->local) continue;
    KOSMOS_RETURN_IF_ERROR(set_device(device_));
    if ((*it)->window != nullptr) KOSMOS_NCCL_CHECK(ncclCommWindowDeregister(static_cast<ncclComm_t>(comm_), (*it)->window));
    (*it)->window = nullptr;
    KOSMOS_NCCL_CHECK(ncclMemFree((*it)->ptr));
    allocations_.erase(it);
    *buffer = SymmetricBuffer{};
    return Status::ok();
  }
  KOSMOS_CHECK(false, "free_symmetric: buffer ", buffer->local, " was not allocated by this transport (rank ", rank_, ")");
}

Status NcclTransport::barrier(cudaStream_t stream) { return barrier_all({this}, {stream}); }

Status NcclTransport::barrier_all(const std::vector<NcclTransport*>& transports,
                                  const std::vector<cudaStream_t>& streams) {
  KOSMOS_CHECK(!transports.empty() && transports.size() == streams.size(),
               "barrier_all: need one stream per transport");
  return in_group(transports.size(), [&](size_t i) -> Status {
    NcclTransport* t = transports[i];
    KOSMOS_NCCL_CHECK(ncclAllReduce(t->barrier_scratch_, t->barrier_scratch_, 1, ncclInt32, ncclSum,
                                    static_cast<ncclComm_t>(t->comm_), streams[i]));
    return Status::ok();
  });
}

namespace {
Status nccl_status(ncclResult_t r, const char* what) {
  return r == ncclSuccess ? Status::ok()
                          : Status(StatusCode::kNcclError, kosmos::detail::concat(what, ": ", ncclGetErrorString(r)));
}
void keep_first(Status* first, Status s) {
  if (first->is_ok() && !s.is_ok()) *first = std::move(s);
}
}  // namespace

// Local resources: windows, memory, device communicator, barrier scratch.
Status NcclTransport::release_local() {
  Status first;
  if (comm_ == nullptr) return first;
  ncclComm_t comm = static_cast<ncclComm_t>(comm_);
  if (device_ >= 0) cudaSetDevice(device_);
  for (auto& a : allocations_) {
    if (a->window != nullptr) keep_first(&first, nccl_status(ncclCommWindowDeregister(comm, a->window), "ncclCommWindowDeregister"));
    if (a->ptr != nullptr) keep_first(&first, nccl_status(ncclMemFree(a->ptr), "ncclMemFree"));
  }
  allocations_.clear();
  if (dev_comm_->created) {
    keep_first(&first, nccl_status(ncclDevCommDestroy(comm, &dev_comm_->dev_comm), "ncclDevCommDestroy"));
    dev_comm_->created = false;
  }
  if (barrier_scratch_ != nullptr) {
    cudaFree(barrier_scratch_);
    barrier_scratch_ = nullptr;
  }
  return first;
}

// Local resources, then the owned communicator (finalize + destroy: an intra-node collective;
// abort instead when set-up failed half-way, so a failing rank does not wait for the others).
Status NcclTransport::release_all() {
  Status first = release_local();
  if (comm_ == nullptr) return first;
  ncclComm_t comm = static_cast<ncclComm_t>(comm_);
  if (owns_comm_) {
    if (!init_done_) {
      keep_first(&first, nccl_status(ncclCommAbort(comm), "ncclCommAbort"));
    } else {
      if (!finalized_) keep_first(&first, nccl_status(ncclCommFinalize(comm), "ncclCommFinalize"));
      keep_first(&first, nccl_status(ncclCommDestroy(comm), "ncclCommDestroy"));
    }
  }
  comm_ = nullptr;
  return first;
}

Status NcclTransport::abort() {
  if (comm_ == nullptr) return Status::ok();
  Status s;
  if (owns_comm_) s = nccl_status(ncclCommAbort(static_cast<ncclComm_t>(comm_)), "ncclCommAbort");
  comm_ = nullptr;  // the destructor leaves everything alone: the process is exiting
  barrier_scratch_ = nullptr;
  allocations_.clear();  // leaked on purpose: freeing would wait for the device
  return s;
}

void NcclTransport::abort_and_exit(const std::string& message) {
  std::fprintf(stderr, "kosmos: rank %d of %d: %s\n", rank_, world_, message.c_str());
  const Status s = abort();
  if (!s.is_ok()) std::fprintf(stderr, "kosmos: rank %d: %s\n", rank_, s.to_string().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

Status NcclTransport::destroy_all(std::vector<std::unique_ptr<NcclTransport>>* transports) {
  KOSMOS_CHECK(transports != nullptr, "destroy_all: null");
  Status first;
  for (auto& t : *transports) {
    if (t) keep_first(&first, t->release_local());
  }
  // Grouped finalize: ncclCommFinalize of several communicators from one thread.
  std::vector<NcclTransport*> owned;
  for (auto& t : *transports) {
    if (t && t->owns_comm_ && !t->finalized_ && t->comm_ != nullptr) owned.push_back(t.get());
  }
  if (!owned.empty()) {
    Status s = in_group(owned.size(), [&](size_t i) -> Status {
      KOSMOS_RETURN_IF_ERROR(set_device(owned[i]->device_));
      KOSMOS_NCCL_CHECK(ncclCommFinalize(static_cast<ncclComm_t>(owned[i]->comm_)));
      return Status::ok();
    });
    if (s.is_ok()) {
      for (NcclTransport* t : owned) t->finalized_ = true;
    }
    keep_first(&first, std::move(s));
  }
  for (auto& t : *transports) {
    if (!t) continue;
    keep_first(&first, t->release_all());
    t.reset();
  }
  transports->clear();
  return first;
}

}  // namespace kosmos::transport
