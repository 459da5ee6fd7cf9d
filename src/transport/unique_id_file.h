// Exchange of an opaque id (ncclUniqueId) between processes through a file on a shared filesystem.
// The writer writes "<path>.tmp.<pid>" and renames it onto <path> (atomic on POSIX), so a reader
// never sees a partial id; readers poll until the file exists or the timeout expires.
#pragma once

#include <cstddef>
#include <string>

#include "kosmos/status.h"

namespace kosmos::transport::detail {

Status write_id_file(const std::string& path, const void* id, size_t id_bytes);
Status read_id_file(const std::string& path, void* id, size_t id_bytes, double timeout_s, int rank);

}  // namespace kosmos::transport::detail
