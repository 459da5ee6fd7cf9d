// The public GEMM arguments (kosmos::GemmArguments) as the engine's descriptor. Shared by
// kosmos::Gemm and the engine benchmark, which runs the same problem through both paths.
#pragma once

#include "kernels/gemm/gemm_host.h"
#include "kosmos/gemm.h"

namespace kosmos::ops {

inline kernels::gemm::GemmDesc to_gemm_desc(const GemmArguments& a) {
  kernels::gemm::GemmDesc d;
  d.a = a.a;
  d.lda = a.lda;
  d.a_col_major = a.a_col_major;
  d.b = a.b;
  d.ldb = a.ldb;
  d.b_transposed = a.b_transposed;
  d.ldb_group = a.ldb_group;
  d.c = a.c;
  d.ldc = a.ldc;
  d.m = a.m;
  d.n = a.n;
  d.k = a.k;
  d.num_groups = a.num_groups;
  d.group_m = a.group_m;
  d.group_offset = a.group_offset;
  d.epilogue = a.epilogue;
  d.row_scale = a.row_scale;
  return d;
}

}  // namespace kosmos::ops
