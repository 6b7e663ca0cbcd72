#version 450
// nn.Linear: out[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]). 64×64 output tiles, 16-deep K
// slices staged in shared memory, 256 invocations each computing a 4×4 block in fp32
// registers. With -DWEIGHTS_F16 the weights are fp16 in memory and both operands are rounded
// to fp16 in shared memory (fp16 inputs, fp32 products and sums: the tensor-core contract).
#include "common.glsl"
#define BM 64
#define BN 64
#define BK 16
#ifdef WEIGHTS_F16
#define STYPE float16_t
#else
#define STYPE float
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { WTYPE w[]; };
layout(std430, binding = 2) readonly buffer Bias { WTYPE bias[]; };
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;
shared STYPE x_tile[BK][BM + 1];
shared STYPE w_tile[BK][BN + 1];
void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint row0 = gl_WorkGroupID.y * BM;
  const uint col0 = gl_WorkGroupID.x * BN;
  const uint tr = (lane / 16) * 4;  // this invocation's 4 rows and 4 columns of the tile
  const uint tc = (lane % 16) * 4;
  float acc[4][4];
  for (uint a = 0; a < 4; ++a)
    for (uint c = 0; c < 4; ++c) acc[a][c] = 0.0;
  for (uint k0 = 0; k0 < p.k; k0 += BK) {
    // 64×16 elements of each operand, 4 per invocation; kk fastest for coalesced reads.
    for (uint e = lane; e < BM * BK; e += 256) {
      const uint r = e / BK;
      const uint kk = e - r * BK;
      const uint gk = k0 + kk;
      const uint gr = row0 + r;
      const uint gc = col0 + r;
      x_tile[kk][r] = STYPE(gr < p.m && gk < p.k ? x[gr * p.k + gk] : 0.0);
      w_tile[kk][r] = gc < p.n && gk < p.k ? STYPE(w[gc * p.k + gk]) : STYPE(0.0);
    }
    barrier();
    for (uint kk = 0; kk < BK; ++kk) {
      float xa[4];
      float wb[4];
      for (uint a = 0; a < 4; ++a) xa[a] = float(x_tile[kk][tr + a]);
      for (uint c = 0; c < 4; ++c) wb[c] = float(w_tile[kk][tc + c]);
      for (uint a = 0; a < 4; ++a)
        for (uint c = 0; c < 4; ++c) acc[a][c] = fma(xa[a], wb[c], acc[a][c]);
    }
    barrier();
  }
  for (uint a = 0; a < 4; ++a) {
    const uint gr = row0 + tr + a;
    if (gr >= p.m) continue;
    for (uint c = 0; c < 4; ++c) {
      const uint gc = col0 + tc + c;
      if (gc >= p.n) continue;
      result[gr * p.n + gc] = acc[a][c] + (p.has_bias != 0 ? float(bias[gc]) : 0.0);
    }
  }
}
