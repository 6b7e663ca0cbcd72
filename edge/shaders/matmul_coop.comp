#version 450
// nn.Linear on the matrix units (GL_NV_cooperative_matrix): out[M, N] = x[M, K] · w[N, K]ᵀ
// (+ bias). fp16 weights; x is rounded to fp16 as it is staged; products and sums in fp32
// (16×16×16 fp16 → fp32 fragments). A 64×64 output tile per workgroup of 4 subgroups of 32
// (the host uses this path only where the device reports that shape and subgroup size);
// each subgroup owns a 32×32 quarter, four fragments. K slices of 32 go through shared memory.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
#define BM 64
#define BN 64
#define BK 32
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float16_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { WTYPE bias[]; };
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;
shared float16_t x_tile[BM * BK];  // row-major [64][32]
shared float16_t w_tile[BN * BK];  // row-major [64][32]: w's rows, i.e. column-major wᵀ
shared float c_tile[BM * BN];
void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint group = gl_SubgroupID;
  const uint row0 = gl_WorkGroupID.y * BM;
  const uint col0 = gl_WorkGroupID.x * BN;
  const uint sub_r = (group / 2) * 32;
  const uint sub_c = (group % 2) * 32;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
  for (uint a = 0; a < 2; ++a)
    for (uint c = 0; c < 2; ++c) acc[a][c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  const bool full = row0 + BM <= p.m && col0 + BN <= p.n && p.k % BK == 0;
  for (uint k0 = 0; k0 < p.k; k0 += BK) {
    for (uint e = lane; e < BM * BK; e += 128) {
      const uint r = e / BK;
      const uint kk = e - r * BK;
      const uint gk = k0 + kk;
      const uint gr = row0 + r;
      const uint gc = col0 + r;
      x_tile[e] = float16_t(full || (gr < p.m && gk < p.k) ? x[gr * p.k + gk] : 0.0);
      w_tile[e] = full || (gc < p.n && gk < p.k) ? w[gc * p.k + gk] : float16_t(0.0);
    }
    barrier();
    for (uint kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> xa[2];
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> wb[2];
      for (uint a = 0; a < 2; ++a)
        coopMatLoadNV(xa[a], x_tile, (sub_r + a * 16) * BK + kk, BK, false);
      for (uint c = 0; c < 2; ++c)
        coopMatLoadNV(wb[c], w_tile, (sub_c + c * 16) * BK + kk, BK, true);
      for (uint a = 0; a < 2; ++a)
        for (uint c = 0; c < 2; ++c) acc[a][c] = coopMatMulAddNV(xa[a], wb[c], acc[a][c]);
    }
    barrier();
  }
  for (uint a = 0; a < 2; ++a)
    for (uint c = 0; c < 2; ++c)
      coopMatStoreNV(acc[a][c], c_tile, (sub_r + a * 16) * BN + sub_c + c * 16, BN, false);
  barrier();
  for (uint e = lane; e < BM * BN; e += 128) {
    const uint r = e / BN;
    const uint c = e - r * BN;
    const uint gr = row0 + r;
    const uint gc = col0 + c;
    if (gr < p.m && gc < p.n) {
      result[gr * p.n + gc] = c_tile[e] + (p.has_bias != 0 ? float(bias[gc]) : 0.0);
    }
  }
}
