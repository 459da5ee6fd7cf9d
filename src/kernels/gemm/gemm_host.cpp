#include "gemm_host.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bf16.h"

namespace kosmos::kernels::gemm {

const char* to_string(GemmDType t) {
  switch (t) {
    case GemmDType::kBF16: return "bf16";
    case GemmDType::kF16: return "f16";
    case GemmDType::kF32: return "f32";
  }
  return "unknown";
}

namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Status get_encode_fn(EncodeTiledFn* out) {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    KOSMOS_CHECK_CODE(e == cudaSuccess && q == cudaDriverEntryPointSuccess && p != nullptr,
                      StatusCode::kUnavailable, "cuTensorMapEncodeTiled unavailable from the driver (",
                      cudaGetErrorString(e), ", query result ", static_cast<int>(q), ")");
    fn = reinterpret_cast<EncodeTiledFn>(p);
  }
  *out = fn;
  return Status::ok();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An engine feature turned off in the environment (NAME=0), for A/B runs of one binary.
bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string(e) == "0";
}

// The TMA-store epilogue (kGemmEpiTmaStore): not with accumulate (read-add-store), and only into
// this device's own memory -- a peer's buffer (another GPU's, through NVLink) keeps the 16-byte
// stores, which are known to work there.
// And only when the output rows are whole 16-byte chunks: the H200 clipped a TMA store at n_out
// only to the 16-byte chunk (n_out = 7 or 300 wrote the padding columns up to the next multiple of 8).
bool tma_store_applies(const GemmDesc& d, int64_t n_out) {
  if (!d.tma_store || (d.epilogue & kGemmEpiAccumulate) || n_out % 8 != 0) return false;
  static const bool disabled = env_off("KOSMOS_GEMM_TMA_STORE");
  if (disabled) return false;
  cudaPointerAttributes attr{};
  int dev = -1;
  if (cudaPointerGetAttributes(&attr, d.c) != cudaSuccess || cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice && attr.device == dev;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

Status encode_bf16_tensor_map(CUtensorMap* map, const char* what, const void* base, int rank, const cuuint64_t* dims,
                              const cuuint64_t* strides_bytes, const cuuint32_t* box) {
  EncodeTiledFn fn = nullptr;
  if (Status s = get_encode_fn(&fn); !s) return s;
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r =
      fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims,
         strides_bytes, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  KOSMOS_CHECK_CODE(r == CUDA_SUCCESS, StatusCode::kInvalidArgument, "cuTensorMapEncodeTiled(", what,
                    ") failed with CUresult ", static_cast<int>(r));
  return Status::ok();
}

GemmTileShape choose_tile_shape(int64_t m, int64_t n, int64_t /*k*/, int num_groups, int num_sms) {
  // Wave efficiency times the relative per-SM throughput of the shape (128x128 moves 1.5x the
  // operand bytes per flop of 128x256).
  const int64_t m_tiles = ceil_div(m, kGemmBlockM) + (num_groups > 0 ? num_groups : 0);
  auto score = [&](int bn, double speed) {
    const int64_t tiles = m_tiles * ceil_div(n, bn);
    const int64_t waves = ceil_div(tiles, std::max(1, num_sms));
    return speed * double(tiles) / double(waves * std::max(1, num_sms));
  };
  const double s256 = score(256, 1.0), s128 = score(128, 0.9), s64 = score(64, 0.7);
  if (s64 > s128 && s64 > s256) return GemmTileShape::k128x64;
  return s128 > s256 ? GemmTileShape::k128x128 : GemmTileShape::k128x256;
}

Status make_gemm_params(const GemmDesc& d, GemmParams* params) {
  KOSMOS_CHECK(params != nullptr, "make_gemm_params: params is null");
  KOSMOS_CHECK(d.a_dtype == GemmDType::kBF16, "GEMM a_dtype is ", to_string(d.a_dtype), ", expected bf16");
  KOSMOS_CHECK(d.b_dtype == GemmDType::kBF16, "GEMM b_dtype is ", to_string(d.b_dtype), ", expected bf16");
  KOSMOS_CHECK(d.c_dtype == GemmDType::kBF16, "GEMM c_dtype is ", to_string(d.c_dtype), ", expected bf16");
  KOSMOS_CHECK(d.m > 0 && d.n > 0 && d.k > 0, "GEMM sizes must be positive, got m = ", d.m, ", n = ", d.n,
               ", k = ", d.k);
  KOSMOS_CHECK(d.m < (int64_t(1) << 31) && d.n < (int64_t(1) << 31) && d.k < (int64_t(1) << 31),
               "GEMM sizes must be < 2^31, got m = ", d.m, ", n = ", d.n, ", k = ", d.k);
  KOSMOS_CHECK((d.epilogue & ~uint32_t(kGemmEpiAccumulate | kGemmEpiRowScale | kGemmEpiSwiGLU | kGemmEpiSavePreact)) == 0,
               "GEMM epilogue flags 0x", std::hex, d.epilogue, " contain unknown bits");
  if (d.epilogue & kGemmEpiSavePreact) {
    KOSMOS_CHECK((d.epilogue & kGemmEpiSwiGLU) && !(d.epilogue & kGemmEpiAccumulate),
                 "GEMM epilogue kGemmEpiSavePreact needs kGemmEpiSwiGLU without kGemmEpiAccumulate, got flags 0x",
                 std::hex, d.epilogue);
    KOSMOS_CHECK(d.c_aux != nullptr, "GEMM epilogue has kGemmEpiSavePreact but c_aux is null");
    KOSMOS_CHECK(aligned16(d.c_aux), "GEMM c_aux = ", d.c_aux, " is not 16-byte aligned");
    KOSMOS_CHECK(d.ldc_aux >= d.n && d.ldc_aux % 8 == 0, "GEMM ldc_aux = ", d.ldc_aux,
                 " must be >= n = ", d.n, " and a multiple of 8 elements");
  }
  const bool swiglu = (d.epilogue & kGemmEpiSwiGLU) != 0;
  KOSMOS_CHECK(!swiglu || d.n % 16 == 0, "GEMM with SwiGLU needs n (= 2 * intermediate) % 16 == 0, got n = ", d.n);
  const int64_t n_out = swiglu ? d.n / 2 : d.n;

  KOSMOS_CHECK(d.a != nullptr, "GEMM a is null");
  KOSMOS_CHECK(d.b != nullptr, "GEMM b is null");
  KOSMOS_CHECK(d.c != nullptr, "GEMM c is null");
  KOSMOS_CHECK(aligned16(d.a), "GEMM a = ", d.a, " is not 16-byte aligned (TMA requirement)");
  KOSMOS_CHECK(aligned16(d.b), "GEMM b = ", d.b, " is not 16-byte aligned (TMA requirement)");
  KOSMOS_CHECK(aligned16(d.c), "GEMM c = ", d.c, " is not 16-byte aligned");
  const int64_t a_min_ld = d.a_col_major ? d.m : d.k;
  KOSMOS_CHECK(d.lda >= a_min_ld, "GEMM lda = ", d.lda, " must be >= ", d.a_col_major ? "m = " : "k = ", a_min_ld,
               d.a_col_major ? " (A col-major [k, m])" : " (A row-major [m, k])");
  KOSMOS_CHECK(d.lda % 8 == 0, "GEMM lda = ", d.lda, " must be a multiple of 8 elements (16-byte TMA stride)");
  const int64_t b_min_ld = d.b_transposed ? d.k : d.n;
  KOSMOS_CHECK(d.ldb >= b_min_ld, "GEMM ldb = ", d.ldb, " must be >= ", d.b_transposed ? "k = " : "n = ", b_min_ld,
               d.b_transposed ? " (B transposed [n, k])" : " (B row-major [k, n])");
  KOSMOS_CHECK(d.ldb % 8 == 0, "GEMM ldb = ", d.ldb, " must be a multiple of 8 elements (16-byte TMA stride)");
  KOSMOS_CHECK(d.ldc >= n_out, "GEMM ldc = ", d.ldc, " must be >= the output columns ", n_out);
  KOSMOS_CHECK(d.ldc % 8 == 0, "GEMM ldc = ", d.ldc, " must be a multiple of 8 elements");
  KOSMOS_CHECK(!(d.epilogue & kGemmEpiRowScale) || d.row_scale != nullptr,
               "GEMM epilogue has kGemmEpiRowScale but row_scale is null");

  const int64_t b_rows = d.b_transposed ? d.n : d.k;  // rows of one group's B
  int64_t ldb_group = d.ldb_group;
  int groups = 1;
  if (d.num_groups != 0) {
    KOSMOS_CHECK(d.num_groups > 0 && d.num_groups <= 256, "GEMM num_groups = ", d.num_groups,
                 ", expected 0 (dense) or 1..256");
    KOSMOS_CHECK(d.group_m != nullptr, "grouped GEMM group_m is null");
    KOSMOS_CHECK(d.group_offset != nullptr, "grouped GEMM group_offset is null");
    if (ldb_group == 0) ldb_group = b_rows * d.ldb;
    KOSMOS_CHECK(ldb_group >= b_rows * d.ldb, "GEMM ldb_group = ", ldb_group, " must be >= ", b_rows * d.ldb,
                 " (rows x ldb of one group's B)");
    KOSMOS_CHECK(ldb_group % 8 == 0, "GEMM ldb_group = ", ldb_group, " must be a multiple of 8 elements");
    groups = d.num_groups;
  } else {
    ldb_group = b_rows * d.ldb;
  }
  if (d.grouped_k) {
    KOSMOS_CHECK(d.num_groups > 0, "grouped-K GEMM needs num_groups >= 1, got ", d.num_groups);
    KOSMOS_CHECK(d.a_col_major && !d.b_transposed,
                 "grouped-K GEMM needs A col-major [k, m] and B row-major [k, n] (got a_col_major = ", d.a_col_major,
                 ", b_transposed = ", d.b_transposed, ")");
    KOSMOS_CHECK((d.epilogue & (kGemmEpiSwiGLU | kGemmEpiRowScale)) == 0,
                 "grouped-K GEMM supports the store and accumulate epilogues only, got flags 0x", std::hex, d.epilogue);
    KOSMOS_CHECK(int64_t(d.num_groups) * d.m < (int64_t(1) << 31), "grouped-K GEMM output rows num_groups * m = ",
                 int64_t(d.num_groups) * d.m, " must be < 2^31");
    groups = 1;  // B is one [K_total, N] matrix; the groups are K row ranges of it
    ldb_group = b_rows * d.ldb;
  }

  GemmTileShape shape = d.tile_shape;
  if (shape == GemmTileShape::kAuto)
    shape = d.grouped_k ? choose_tile_shape(d.num_groups * ceil_div(d.m, kGemmBlockM) * kGemmBlockM, d.n, d.k, 0, d.num_sms)
                        : choose_tile_shape(d.m, d.n, d.k, d.num_groups, d.num_sms);
  KOSMOS_CHECK(shape == GemmTileShape::k128x256 || shape == GemmTileShape::k128x128 ||
                   shape == GemmTileShape::k128x64,
               "GEMM tile_shape = ",
               static_cast<uint32_t>(shape), " is not a compiled tile shape");
  const int bn = gemm_block_n(shape);

  GemmParams p;
  std::memset(&p, 0, sizeof(p));
  p.c = d.c;
  p.row_scale = d.row_scale;
  p.group_m = d.group_m;
  p.group_offset = d.group_offset;
  p.ldc = d.ldc;
  if (d.epilogue & kGemmEpiSavePreact) {
    p.c_aux = d.c_aux;
    p.ldc_aux = d.ldc_aux;
  }
  p.m = static_cast<int32_t>(d.m);
  p.n = static_cast<int32_t>(d.n);
  p.n_out = static_cast<int32_t>(n_out);
  p.k = static_cast<int32_t>(d.k);
  p.num_groups = d.num_groups;
  p.epilogue = d.epilogue;
  p.layout = (d.a_col_major ? kGemmAColMajor : 0u) | (d.b_transposed ? kGemmBTransposed : 0u) |
             (d.grouped_k ? kGemmGroupedK : 0u);
  static const bool keep_disabled = env_off("KOSMOS_GEMM_KEEP_OPERANDS");
  if (d.keep_operands && !keep_disabled) p.layout |= kGemmKeepOperands;
  if (d.merge_tails) {
    KOSMOS_CHECK(d.num_groups > 0 && !d.grouped_k, "GEMM merge_tails needs a problem grouped over M (num_groups = ",
                 d.num_groups, ", grouped_k = ", d.grouped_k, ")");
    KOSMOS_CHECK(!d.a_col_major && !d.b_transposed, "GEMM merge_tails needs A row-major and B [K, N] (a_col_major = ",
                 d.a_col_major, ", b_transposed = ", d.b_transposed, ")");
    KOSMOS_CHECK(shape == GemmTileShape::k128x256, "GEMM merge_tails needs the 128x256 tile (got ", gemm_block_n(shape),
                 " columns)");
    KOSMOS_CHECK((d.epilogue & kGemmEpiAccumulate) == 0, "GEMM merge_tails cannot accumulate into C");
    // KOSMOS_GEMM_MERGE_TAILS=0: every problem plans without (A/B measurements; the MoE's two
    // GEMMs stay alike).
    static const bool merge_disabled = env_off("KOSMOS_GEMM_MERGE_TAILS");
    if (!merge_disabled) p.layout |= kGemmMergeTails;
  }
  if (d.expert_major) {
    KOSMOS_CHECK(d.num_groups > 0 && !d.grouped_k, "GEMM expert_major needs a problem grouped over M (num_groups = ",
                 d.num_groups, ", grouped_k = ", d.grouped_k, ")");
    p.layout |= kGemmExpertMajor;
  }
  p.tile_shape = shape;
  p.num_m_tiles = static_cast<int32_t>(d.grouped_k ? d.num_groups * ceil_div(d.m, kGemmBlockM)
                                                   : ceil_div(d.m, kGemmBlockM) + d.num_groups);
  p.num_n_tiles = static_cast<int32_t>(ceil_div(d.n, bn));

  if (d.encode_tma) {
    {  // A
      const cuuint64_t dims[2] = {cuuint64_t(d.a_col_major ? d.m : d.k), cuuint64_t(d.a_col_major ? d.k : d.m)};
      const cuuint64_t strides[1] = {cuuint64_t(d.lda) * 2};
      const cuuint32_t box[2] = {64, d.a_col_major ? 64u : cuuint32_t(kGemmBlockM)};
      if (Status s = encode_bf16_tensor_map(&p.tma_a, "A", d.a, 2, dims, strides, box); !s) return s;
      if (p.layout & kGemmMergeTails) {  // the same A, in boxes of a merged tail's rows
        const cuuint32_t tail_box[2] = {64, cuuint32_t(kGemmTailRows)};
        if (Status s = encode_bf16_tensor_map(&p.tma_t, "A (merged tails)", d.a, 2, dims, strides, tail_box); !s)
          return s;
      }
    }
    {  // B, 3-D with the group as the outer dimension so tails never read the next group
      const cuuint64_t dims[3] = {cuuint64_t(d.b_transposed ? d.k : d.n), cuuint64_t(d.b_transposed ? d.n : d.k),
                                  cuuint64_t(groups)};
      const cuuint64_t strides[2] = {cuuint64_t(d.ldb) * 2, cuuint64_t(ldb_group) * 2};
      const cuuint32_t box[3] = {64, d.b_transposed ? cuuint32_t(bn) : 64u, 1};
      if (Status s = encode_bf16_tensor_map(&p.tma_b, "B", d.b, 3, dims, strides, box); !s) return s;
    }
    if (tma_store_applies(d, n_out)) {  // C, [rows, n_out] in boxes of one consumer warp's 16 x 64 staging slice
      const int64_t rows = d.grouped_k ? int64_t(d.num_groups) * d.m : d.m;
      const cuuint64_t dims[2] = {cuuint64_t(n_out), cuuint64_t(rows)};
      const cuuint64_t strides[1] = {cuuint64_t(d.ldc) * 2};
      const cuuint32_t box[2] = {64, 16};
      if (Status s = encode_bf16_tensor_map(&p.tma_c, "C", d.c, 2, dims, strides, box); !s) return s;
      p.epilogue |= kGemmEpiTmaStore;
    }
  }
  *params = p;
  return Status::ok();
}

namespace {

// Grouped-K tile run (gemm_params.h): C[g * M + r, col] = Σ_{kk in group g's K rows} A[kk, r] · B[kk, col],
// k in increasing order, fp32. Like the device it reads whole k blocks: the group's rows plus the
// padding up to the next BK multiple (clipped at K_total, where TMA fills zeros), so a padding row
// that is not zero shows up on the CPU executor too.
void gemm_tile_host_grouped_k(const GemmDesc& d, const GemmParams& p, const GemmTileArgs& args) {
  const int bm = kGemmBlockM, bn = gemm_block_n(p.tile_shape);
  const auto* a = static_cast<const uint16_t*>(d.a);
  const auto* b = static_cast<const uint16_t*>(d.b);
  auto* c = static_cast<uint16_t*>(d.c);
  const int tiles_per_group = int(ceil_div(p.m, bm));
  std::vector<float> acc(size_t(bm) * bn);
  for (uint32_t i = 0; i < std::max(1u, args.count); ++i) {
    const bool along_n = (args.flags & kGemmRunAlongN) != 0;
    const int slot = int(args.tile_m + (along_n ? 0 : i));
    if (slot >= p.num_m_tiles) break;
    const int g = slot / tiles_per_group, m0 = (slot % tiles_per_group) * bm;
    const int rows = std::min(bm, p.m - m0);
    const int n0 = int(args.tile_n + (along_n ? i : 0)) * bn;
    if (n0 >= p.n) break;
    const int cols = std::min(bn, p.n - n0);
    const int64_t k0 = d.group_offset[g], kg = d.group_m[g];
    const int64_t k1 = std::min<int64_t>(k0 + ceil_div(kg, kGemmBlockK) * kGemmBlockK, p.k);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t kk = k0; kk < k1; ++kk)
      for (int r = 0; r < rows; ++r) {
        const float av = bf16_to_float(a[kk * d.lda + m0 + r]);
        for (int cc = 0; cc < cols; ++cc) acc[size_t(r) * bn + cc] += av * bf16_to_float(b[kk * d.ldb + n0 + cc]);
      }
    for (int r = 0; r < rows; ++r) {
      uint16_t* out = c + (int64_t(g) * p.m + m0 + r) * d.ldc + n0;
      for (int cc = 0; cc < cols; ++cc) {
        float v = acc[size_t(r) * bn + cc];
        if (p.epilogue & kGemmEpiAccumulate) v += bf16_to_float(out[cc]);
        out[cc] = float_to_bf16(v);
      }
    }
  }
}

}  // namespace

void gemm_tile_host(const GemmDesc& d, const GemmParams& p, const GemmTileArgs& args) {
  if (p.layout & kGemmGroupedK) return gemm_tile_host_grouped_k(d, p, args);
  const int bm = kGemmBlockM, bn = gemm_block_n(p.tile_shape);
  const auto* a = static_cast<const uint16_t*>(d.a);
  const auto* b = static_cast<const uint16_t*>(d.b);
  auto* c = static_cast<uint16_t*>(d.c);
  const bool swiglu = (p.epilogue & kGemmEpiSwiGLU) != 0;
  const int64_t b_rows = d.b_transposed ? d.n : d.k;
  const int64_t ldbg = d.num_groups > 0 && d.ldb_group != 0 ? d.ldb_group : b_rows * d.ldb;
  std::vector<float> acc(size_t(bm + kGemmTailRows) * bn);  // a merged tail's rows included
  for (uint32_t i = 0; i < std::max(1u, args.count); ++i) {
    const bool along_n = (args.flags & kGemmRunAlongN) != 0;
    const int slot = int(args.tile_m + (along_n ? 0 : i));
    int a_row0 = 0, rows = 0, group = 0, n_mapped = -1;
    if (p.num_groups == 0) {
      if (slot >= p.num_m_tiles) break;
      a_row0 = slot * bm;
      rows = std::min(bm, p.m - a_row0);
    } else if (p.layout & kGemmExpertMajor) {  // (slot, n) is a claim position: see kGemmExpertMajor
      const bool merge = (p.layout & kGemmMergeTails) != 0;
      auto blocks_of = [&](int g) {
        int tail = 0;
        return gemm_group_blocks(d.group_m[g], merge, &tail);
      };
      int b = 0, n = 0;
      if (along_n || !gemm_expert_major_tile(blocks_of, p.num_groups, int64_t(slot) * p.num_n_tiles + args.tile_n,
                                             p.num_n_tiles, &group, &b, &n))
        break;
      int tail = 0;
      const int blocks = gemm_group_blocks(d.group_m[group], merge, &tail);
      a_row0 = d.group_offset[group] + b * bm;
      rows = std::min(bm, d.group_m[group] - b * bm) + (b == blocks - 1 ? tail : 0);
      n_mapped = n;
    } else {
      int s = slot;
      bool found = false;
      for (int g = 0; g < p.num_groups && !found; ++g) {
        int tail = 0;
        const int blocks = gemm_group_blocks(d.group_m[g], (p.layout & kGemmMergeTails) != 0, &tail);
        if (s < blocks) {
          group = g;
          a_row0 = d.group_offset[g] + s * bm;
          rows = std::min(bm, d.group_m[g] - s * bm) + (s == blocks - 1 ? tail : 0);
          found = true;
        } else {
          s -= blocks;
        }
      }
      if (!found) break;
    }
    const int n0 = (n_mapped >= 0 ? n_mapped : int(args.tile_n + (along_n ? i : 0))) * bn;
    if (n0 >= p.n) break;
    const int cols = std::min(bn, p.n - n0);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int r = 0; r < rows; ++r) {
      const int64_t ar = a_row0 + r;
      if (ar >= p.m) break;  // rows past A read as zero on the device (TMA fill) and are not stored
      for (int kk = 0; kk < p.k; ++kk) {
        const float av = bf16_to_float(d.a_col_major ? a[kk * d.lda + ar] : a[ar * d.lda + kk]);
        for (int cc = 0; cc < cols; ++cc) {
          const int64_t bc = n0 + cc;
          const uint16_t bv = d.b_transposed ? b[group * ldbg + bc * d.ldb + kk] : b[group * ldbg + kk * d.ldb + bc];
          acc[size_t(r) * bn + cc] += av * bf16_to_float(bv);
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      const int64_t row = a_row0 + r;
      if (row >= p.m) break;
      const float scale = (p.epilogue & kGemmEpiRowScale) ? d.row_scale[row] : 1.0f;
      if (p.epilogue & kGemmEpiSavePreact)
        for (int cc = 0; cc < cols; ++cc) static_cast<uint16_t*>(d.c_aux)[row * d.ldc_aux + n0 + cc] = float_to_bf16(acc[size_t(r) * bn + cc]);
      for (int cc = 0; cc < cols; ++cc) {
        float v;
        int64_t col;
        if (swiglu) {
          if ((cc / 8) % 2 == 1) continue;  // up columns are consumed with their gate column
          const float gate = acc[size_t(r) * bn + cc], up = acc[size_t(r) * bn + cc + 8];
          v = gate / (1.0f + std::exp(-gate)) * up;
          col = (n0 + cc) / 16 * 8 + (n0 + cc) % 8;
        } else {
          v = acc[size_t(r) * bn + cc];
          col = n0 + cc;
        }
        if (col >= p.n_out) continue;
        v *= scale;
        uint16_t* out = c + row * d.ldc + col;
        if (p.epilogue & kGemmEpiAccumulate) v += bf16_to_float(*out);
        *out = float_to_bf16(v);
      }
    }
  }
}

}  // namespace kosmos::kernels::gemm
