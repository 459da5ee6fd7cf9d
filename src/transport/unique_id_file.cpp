#include "transport/unique_id_file.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace kosmos::transport::detail {
namespace {

// File layout: kMagic (8 bytes), then the id bytes.
constexpr char kMagic[8] = {'K', 'O', 'S', 'M', 'O', 'S', 'I', 'D'};

}  // namespace

Status write_id_file(const std::string& path, const void* id, size_t id_bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  KOSMOS_CHECK_CODE(f != nullptr, StatusCode::kUnavailable, "cannot create NCCL id file '", tmp,
                    "': ", std::strerror(errno), " (KOSMOS_NCCL_ID_FILE must be in a writable folder "
                    "that every rank can read)");
  bool ok = std::fwrite(kMagic, 1, sizeof kMagic, f) == sizeof kMagic &&
            std::fwrite(id, 1, id_bytes, f) == id_bytes && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    KOSMOS_CHECK_CODE(false, StatusCode::kUnavailable, "cannot publish NCCL id file '", path, "': ",
                      std::strerror(err));
  }
  return Status::ok();
}

Status read_id_file(const std::string& path, void* id, size_t id_bytes, double timeout_s, int rank) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<char> buf(sizeof kMagic + id_bytes);
  auto sleep = std::chrono::milliseconds(1);
  for (;;) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const size_t got = std::fread(buf.data(), 1, buf.size(), f);
      std::fclose(f);
      // The writer renames a complete file into place, so a short or foreign file is an error,
      // not a race.
      KOSMOS_CHECK_CODE(got == buf.size() && std::memcmp(buf.data(), kMagic, sizeof kMagic) == 0,
                        StatusCode::kInvalidArgument, "NCCL id file '", path, "' is not a kosmos id file (",
                        got, " bytes)");
      std::memcpy(id, buf.data() + sizeof kMagic, id_bytes);
      return Status::ok();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    KOSMOS_CHECK_CODE(waited < timeout_s, StatusCode::kTimeout, "rank ", rank, " waited ", timeout_s,
                      " s for rank 0 to write the NCCL id file '", path,
                      "' (KOSMOS_NCCL_ID_FILE); is rank 0 running, and do all ranks see the same "
                      "filesystem? (timeout: KOSMOS_NCCL_ID_TIMEOUT_S)");
    std::this_thread::sleep_for(sleep);
    if (sleep < std::chrono::milliseconds(50)) sleep *= 2;
  }
}

}  // namespace kosmos::transport::detail
