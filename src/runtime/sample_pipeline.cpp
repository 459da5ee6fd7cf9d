#include "runtime/sample_pipeline.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/basic_tasks.h"
#include "kosmos/cuda_check.h"

namespace kosmos::runtime {

namespace {
uint32_t encode(uint32_t rank, uint64_t word) { return (rank << 24) ^ uint32_t(word * 2654435761u); }
}  // namespace

Status make_sample_plan(uint32_t world, uint32_t chunks, uint64_t chunk_bytes, uint64_t spin_ns, plan::Plan* out) {
  KOSMOS_CHECK(world >= 1 && chunks >= 1 && chunk_bytes >= 8 && chunk_bytes % 16 == 0,
               "sample plan: need world >= 1, chunks >= 1, chunk_bytes a multiple of 16");
  plan::PlanBuilder b(world, "sample_pipeline");
  const uint32_t src = b.add_buffer("src", chunks * chunk_bytes);
  const uint32_t dst = b.add_buffer("dst", chunks * chunk_bytes);
  const uint32_t sums = b.add_buffer("checksums", chunks * 8);
  const uint32_t copied = b.add_counters(chunks);
  const uint32_t computed = b.add_counters(chunks);
  for (uint32_t r = 0; r < world; ++r) {
    const uint32_t from = (r + 1) % world;  // pull from the next rank: a ring of transfers
    for (uint32_t c = 0; c < chunks; ++c) {
      uint32_t t = b.add_task(plan::TaskKind::kCopy, r,
                              plan::CopyArgs{uint16_t(src), uint16_t(from), uint16_t(dst), uint16_t(r), c * chunk_bytes,
                                             c * chunk_bytes, chunk_bytes});
      b.signal(t, r, copied + c);
      uint32_t s = b.add_task(plan::TaskKind::kSpin, r, plan::SpinArgs{spin_ns});
      b.wait(s, copied + c, 1);
      b.signal(s, r, computed + c);
      uint32_t k = b.add_task(plan::TaskKind::kChecksum, r,
                              plan::ChecksumArgs{uint16_t(dst), uint16_t(r), uint16_t(sums), uint16_t(r), c * chunk_bytes,
                                                 chunk_bytes, c * 8ull});
      b.wait(k, computed + c, 1);
    }
  }
  return b.build(out);
}


Status run_sample(const std::string& executor, uint32_t world, uint32_t chunks, uint64_t chunk_bytes, uint64_t spin_ns,
                  int runs, bool trace, SampleResult* out) {
  plan::Plan p;
  KOSMOS_RETURN_IF_ERROR(make_sample_plan(world, chunks, chunk_bytes, spin_ns, &p));
  const uint64_t bytes = chunks * chunk_bytes;
  std::vector<std::vector<uint32_t>> src(world, std::vector<uint32_t>(bytes / 4));
  for (uint32_t r = 0; r < world; ++r)
    for (uint64_t i = 0; i < bytes / 4; ++i) src[r][i] = encode(r, i);
  std::vector<std::vector<uint32_t>> dst(world, std::vector<uint32_t>(bytes / 4));
  std::vector<std::vector<uint64_t>> sums(world, std::vector<uint64_t>(chunks));
  std::vector<double> times;
  out->executor = executor;
  out->world = world;
  out->chunks = chunks;
  out->chunk_bytes = chunk_bytes;
  out->tasks = uint32_t(p.tasks.size());
  out->runs = runs;

  if (executor == "cpu") {
    CpuOptions o;
    o.trace = trace;
    std::unique_ptr<CpuExecutor> ex;
    KOSMOS_RETURN_IF_ERROR(CpuExecutor::create(p, o, &ex));
    for (uint32_t r = 0; r < world; ++r) std::memcpy(ex->buffer(0, r), src[r].data(), bytes);
    for (int i = 0; i < runs; ++i) {
      for (uint32_t r = 0; r < world; ++r) std::memset(ex->buffer(1, r), 0xAB, bytes);  // poison
      auto t0 = std::chrono::steady_clock::now();
      KOSMOS_RETURN_IF_ERROR(ex->run());
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    for (uint32_t r = 0; r < world; ++r) {
      std::memcpy(dst[r].data(), ex->buffer(1, r), bytes);
      std::memcpy(sums[r].data(), ex->buffer(2, r), chunks * 8);
    }
    out->trace = ex->trace();
  } else {
    GpuOptions o;
    o.trace = trace;
    std::unique_ptr<GpuExecutor> ex;
    KOSMOS_RETURN_IF_ERROR(GpuExecutor::create(p, o, &ex));
    for (uint32_t r = 0; r < world; ++r)
      KOSMOS_CUDA_CHECK(cudaMemcpy(ex->buffer(0, r), src[r].data(), bytes, cudaMemcpyHostToDevice));
    cudaStream_t s;
    KOSMOS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    KOSMOS_CUDA_CHECK(cudaEventCreate(&a));
    KOSMOS_CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < runs; ++i) {
      for (uint32_t r = 0; r < world; ++r) KOSMOS_CUDA_CHECK(cudaMemsetAsync(ex->buffer(1, r), 0xAB, bytes, s));
      KOSMOS_CUDA_CHECK(cudaEventRecord(a, s));
      KOSMOS_RETURN_IF_ERROR(ex->run(s));
      KOSMOS_CUDA_CHECK(cudaEventRecord(b, s));
      KOSMOS_RETURN_IF_ERROR(ex->finish(s));
      float ms = 0;
      KOSMOS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      times.push_back(ms * 1e3);
    }
    for (uint32_t r = 0; r < world; ++r) {
      KOSMOS_CUDA_CHECK(cudaMemcpy(dst[r].data(), ex->buffer(1, r), bytes, cudaMemcpyDeviceToHost));
      KOSMOS_CUDA_CHECK(cudaMemcpy(sums[r].data(), ex->buffer(2, r), chunks * 8, cudaMemcpyDeviceToHost));
    }
    if (trace) KOSMOS_RETURN_IF_ERROR(ex->read_trace(&out->trace));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
  }
  // Verify: rank r holds rank (r+1)%W's source; checksums match the host's.
  for (uint32_t r = 0; r < world; ++r) {
    const uint32_t from = (r + 1) % world;
    for (uint64_t i = 0; i < bytes / 4; ++i)
      KOSMOS_CHECK_CODE(dst[r][i] == src[from][i], StatusCode::kInternal, "sample: rank ", r, " word ", i, " is ", dst[r][i],
                        ", expected ", src[from][i], " (from rank ", from, ")");
    for (uint32_t c = 0; c < chunks; ++c) {
      uint64_t want = kernels::checksum_host(reinterpret_cast<const char*>(src[from].data()) + c * chunk_bytes, chunk_bytes);
      KOSMOS_CHECK_CODE(sums[r][c] == want, StatusCode::kInternal, "sample: rank ", r, " chunk ", c, " checksum ",
                        sums[r][c], ", expected ", want);
    }
  }
  out->verified = true;
  std::sort(times.begin(), times.end());
  out->median_us = times[times.size() / 2];
  return Status::ok();
}

}  // namespace kosmos::runtime
