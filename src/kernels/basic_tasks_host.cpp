#include <chrono>
#include <cstring>

#include "kernels/basic_tasks.h"

namespace kosmos::kernels {

namespace {
Status check_range(const plan::Plan& plan, const plan::Task& t, const char* what, uint32_t buffer, uint32_t rank,
                   uint64_t offset, uint64_t bytes) {
  KOSMOS_CHECK_CODE(buffer < plan.buffers.size(), StatusCode::kInvalidPlan, "task ", t.id, " (",
                    plan::to_string(t.kind), "): ", what, " buffer ", buffer, " does not exist (plan has ",
                    plan.buffers.size(), ")");
  KOSMOS_CHECK_CODE(rank < plan.world, StatusCode::kInvalidPlan, "task ", t.id, " (", plan::to_string(t.kind),
                    "): ", what, " rank ", rank, " out of range for world ", plan.world);
  const uint64_t size = plan.buffers[buffer].bytes_per_rank;
  KOSMOS_CHECK_CODE(offset <= size && bytes <= size - offset, StatusCode::kInvalidPlan, "task ", t.id, " (",
                    plan::to_string(t.kind), "): ", what, " range [", offset, ", ", offset + bytes,
                    ") exceeds buffer ", buffer, " '", plan.buffers[buffer].name, "' of ", size, " bytes");
  return Status::ok();
}
}  // namespace

Status validate_builtin_task(const plan::Plan& plan, const plan::Task& t) {
  switch (t.kind) {
    case plan::TaskKind::kCopy: {
      auto a = t.args<plan::CopyArgs>();
      KOSMOS_RETURN_IF_ERROR(check_range(plan, t, "source", a.src_buffer, a.src_rank, a.src_offset, a.bytes));
      KOSMOS_RETURN_IF_ERROR(check_range(plan, t, "destination", a.dst_buffer, a.dst_rank, a.dst_offset, a.bytes));
      return Status::ok();
    }
    case plan::TaskKind::kChecksum: {
      auto a = t.args<plan::ChecksumArgs>();
      KOSMOS_CHECK_CODE(a.offset % 4 == 0 && a.bytes % 4 == 0, StatusCode::kInvalidPlan, "task ", t.id,
                        " (checksum): offset ", a.offset, " and bytes ", a.bytes, " must be multiples of 4");
      KOSMOS_CHECK_CODE(a.out_offset % 8 == 0, StatusCode::kInvalidPlan, "task ", t.id,
                        " (checksum): out_offset ", a.out_offset, " must be a multiple of 8");
      KOSMOS_RETURN_IF_ERROR(check_range(plan, t, "source", a.src_buffer, a.src_rank, a.offset, a.bytes));
      KOSMOS_RETURN_IF_ERROR(check_range(plan, t, "output", a.out_buffer, a.out_rank, a.out_offset, 8));
      return Status::ok();
    }
    default: return Status::ok();
  }
}

void spin_host(uint64_t ns) {
  auto t0 = std::chrono::steady_clock::now();
  while (uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()) < ns) {
  }
}

void copy_host(const void* src, void* dst, uint64_t bytes) { std::memmove(dst, src, bytes); }

uint64_t checksum_host(const void* src, uint64_t bytes) {
  const uint32_t* w = static_cast<const uint32_t*>(src);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < bytes / 4; ++i) sum += uint64_t(w[i]) * (2 * i + 1);
  return sum;
}

}  // namespace kosmos::kernels
