#version 450
// nn.Linear on the matrix units (GL_NV_cooperative_matrix): out[M, N] = x[M, K] · w[N, K]ᵀ
// (+ bias). fp16 weights; x is rounded to fp16 as it is staged; products and sums in fp32
// (16×16×16 fp16 → fp32 fragments). A BM×BN output block per workgroup of WARPS_M×WARPS_N
// subgroups of 32 (the host uses this path only where the device reports that shape and
// subgroup size); each subgroup owns a (BM/WARPS_M)×(BN/WARPS_N) part of the block, FM×FN
// accumulator fragments. K slices of BK go through shared memory: while the subgroups multiply
// one slice out of shared memory, the next slice's global loads (16-byte vectors where K allows)
// are already in flight into registers, so global latency hides behind the matrix units.
// Shared memory holds 16-byte vectors of 8 halves, written with one store each and read by the
// fragment loads in those units (offsets and strides count vectors): a tile held as single
// halves costs one 2-byte shared access an element on both sides, which starved the matrix units.
// Ragged edges: rows, columns and K beyond the matrix are staged as zeros (they add nothing) and
// the epilogue writes only in-range outputs; with K not a multiple of 8 the loads are scalar.
// -DWEIGHTS_INT8: int8 weights with fp16 scales (edge/shaders/int8.glsl) instead of fp16 ones;
// each invocation loads its 8 bytes and their group's scale, and dequantizes them to fp16 as it
// stages them (fp16(q · scale): the one rounding fp16 weights had), so the units multiply as
// before and no fp16 copy of the weights exists. -DX_F16: x is fp16 in memory
// (Backend::MatmulInput), staged as it is.
// The block shape is set by -DBM/-DBN/-DWARPS_M/-DWARPS_N (and -DBK, -DGROUP_M for the launch
// order) in edge/CMakeLists.txt;
// the host reads the block from edge/shaders.h.
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef BK
#define BK 32  // a multiple of 16 (fragment depth) and of 8 (vector loads)
#endif
#define THREADS (WARPS_M * WARPS_N * 32)
#define SUB_M (BM / WARPS_M)
#define SUB_N (BN / WARPS_N)
#define FM (SUB_M / 16)
#define FN (SUB_N / 16)
// Shared rows are BK + 8 halves (80 bytes for BK 32): whole 16-byte vectors for the fragment
// loads, and consecutive rows start in different banks. LDV counts them in vectors.
#define LDS (BK + 8)
#define LDV (LDS / 8)
// Per invocation and K slice: 8 consecutive elements of a row each, x as two fp32 vec4s, w as
// 8 fp16 in a uvec4.
#define X_VECS (BM * BK / 8 / THREADS)
#define W_VECS (BN * BK / 8 / THREADS)
#if X_VECS * 8 * THREADS != BM * BK || W_VECS * 8 * THREADS != BN * BK || \
    FM * 16 != SUB_M || FN * 16 != SUB_N
#error "block shape: 16-row fragments per subgroup and whole vectors per invocation"
#endif
layout(local_size_x = THREADS) in;
#ifdef X_F16
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
layout(std430, binding = 0) readonly buffer X8 { uvec4 x8[]; };
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
#endif
#ifdef WEIGHTS_INT8
#include "int8.glsl"
#else
layout(std430, binding = 1) readonly buffer W { float16_t w[]; };
layout(std430, binding = 1) readonly buffer W8 { uvec4 w8[]; };
layout(std430, binding = 2) readonly buffer Bias { WTYPE bias[]; };
#endif
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;
shared uvec4 x_tile[BM * LDV];  // row-major [BM][BK] halves
shared uvec4 w_tile[BN * LDV];  // row-major [BN][BK]: w's rows, i.e. column-major wᵀ
shared float stage[WARPS_M * WARPS_N * 256];  // one 16×16 fp32 fragment per subgroup
#ifdef X_F16
uvec4 x_next[X_VECS];  // 8 halves each
#else
vec4 x_next[2 * X_VECS];
#endif
#ifdef WEIGHTS_INT8
uvec2 w_next[W_VECS];  // 8 int8 each, the lowest byte first
float w_scale[W_VECS];  // their group's scale
uint scale_base, groups;  // int8.glsl's ScaleBase, and a row's scales
#else
uvec4 w_next[W_VECS];
#endif
uint row0, col0, lane;
bool vectors;

// The K slice at k0 of x and w into registers (zeros outside the matrix).
void Fetch(uint k0) {
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
    const uint kk = (e - r * (BK / 8)) * 8;
    const uint gr = row0 + r;
    const uint gk = k0 + kk;
#ifdef X_F16
    if (vectors) {
      x_next[i] = gr < p.m && gk < p.k ? x8[(gr * p.k + gk) / 8] : uvec4(0);
    } else {
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        const uint a = gk + 2 * j;
        const float16_t lo = gr < p.m && a < p.k ? x[gr * p.k + a] : float16_t(0.0);
        const float16_t hi = gr < p.m && a + 1 < p.k ? x[gr * p.k + a + 1] : float16_t(0.0);
        x_next[i][j] = packFloat2x16(f16vec2(lo, hi));
      }
    }
#else
    if (vectors) {
      const bool inside = gr < p.m && gk < p.k;
      x_next[2 * i] = inside ? x4[(gr * p.k + gk) / 4] : vec4(0.0);
      x_next[2 * i + 1] = inside ? x4[(gr * p.k + gk) / 4 + 1] : vec4(0.0);
    } else {
      [[unroll]] for (uint j = 0; j < 8; ++j) {
        x_next[2 * i + j / 4][j % 4] = gr < p.m && gk + j < p.k ? x[gr * p.k + gk + j] : 0.0;
      }
    }
#endif
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
    const uint kk = (e - r * (BK / 8)) * 8;
    const uint gc = col0 + r;
    const uint gk = k0 + kk;
#ifdef WEIGHTS_INT8
    // 8 consecutive k from a multiple of 8 lie within one group; zeros (scale 0) outside.
    uvec2 q = uvec2(0);
    float scale = 0.0;
    if (gc < p.n && gk < p.k) {
      scale = ScaleAt(scale_base, gc * groups + gk / GROUP);
      if (vectors) {
        q = wq2[(gc * p.k + gk) / 8];
      } else {
        [[unroll]] for (uint j = 0; j < 8; ++j) {
          const uint at = gc * p.k + gk + j;
          if (gk + j < p.k) q[j / 4] |= ((wq[at / 4] >> (8 * (at % 4))) & 0xFFu) << (8 * (j % 4));
        }
      }
    }
    w_next[i] = q;
    w_scale[i] = scale;
#else
    if (vectors) {
      w_next[i] = gc < p.n && gk < p.k ? w8[(gc * p.k + gk) / 8] : uvec4(0);
    } else {
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        const uint a = gk + 2 * j;
        const float16_t lo = gc < p.n && a < p.k ? w[gc * p.k + a] : float16_t(0.0);
        const float16_t hi = gc < p.n && a + 1 < p.k ? w[gc * p.k + a + 1] : float16_t(0.0);
        w_next[i][j] = packFloat2x16(f16vec2(lo, hi));
      }
    }
#endif
  }
}

// The fetched slice from registers into shared memory, one 16-byte store a vector; x rounded to
// fp16 (packHalf2x16 rounds to nearest even, as a float16_t conversion does).
void Stash() {
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
#ifdef X_F16
    x_tile[r * LDV + (e - r * (BK / 8))] = x_next[i];  // fp16 already
#else
    const vec4 lo = x_next[2 * i];
    const vec4 hi = x_next[2 * i + 1];
    x_tile[r * LDV + (e - r * (BK / 8))] = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw),
                                                 packHalf2x16(hi.xy), packHalf2x16(hi.zw));
#endif
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
#ifdef WEIGHTS_INT8
    // q · scale, exact in fp32, rounded to fp16 (to nearest even, as packHalf2x16 rounds).
    const vec4 lo = Bytes4(w_next[i].x) * w_scale[i];
    const vec4 hi = Bytes4(w_next[i].y) * w_scale[i];
    w_tile[r * LDV + (e - r * (BK / 8))] = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw),
                                                 packHalf2x16(hi.xy), packHalf2x16(hi.zw));
#else
    w_tile[r * LDV + (e - r * (BK / 8))] = w_next[i];  // the weights' fp16 bits as they are
#endif
  }
}

void main() {
  lane = gl_LocalInvocationID.x;
  uvec2 block = gl_WorkGroupID.xy;
#ifdef GROUP_M
  // Grouped order: workgroups launch in the order of their linear id, and here consecutive
  // ones walk down GROUP_M block rows before moving one block column on, so the x rows and
  // w columns they read are shared while still in L2 (row-major order streams all of w for
  // every block row).
  const uint linear = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint group_size = GROUP_M * gl_NumWorkGroups.x;
  const uint first_row = (linear / group_size) * GROUP_M;
  const uint rows_in_group = min(gl_NumWorkGroups.y - first_row, GROUP_M);
  const uint in_group = linear % group_size;
  block = uvec2(in_group / rows_in_group, first_row + in_group % rows_in_group);
#endif
  row0 = block.y * BM;
  col0 = block.x * BN;
  vectors = p.k % 8 == 0;  // every row of x and w then starts 16-byte aligned (offset-0 buffers)
#ifdef WEIGHTS_INT8
  scale_base = ScaleBase(p.n, p.k);
  groups = (p.k + GROUP - 1) / GROUP;
  const bool has_bias = (p.has_bias & FLAG_BIAS) != 0u;
#else
  const bool has_bias = p.has_bias != 0;
#endif
  const uint group = gl_SubgroupID;
  const uint sub_r = (group / WARPS_N) * SUB_M;
  const uint sub_c = (group % WARPS_N) * SUB_N;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[FM][FN];
  [[unroll]] for (uint a = 0; a < FM; ++a)
    [[unroll]] for (uint c = 0; c < FN; ++c) {
      acc[a][c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    }
  Fetch(0);
  for (uint k0 = 0; k0 < p.k; k0 += BK) {
    barrier();  // everyone is done reading the previous slice
    Stash();
    barrier();
    if (k0 + BK < p.k) Fetch(k0 + BK);
    [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> xa[FM];
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> wb[FN];
      [[unroll]] for (uint a = 0; a < FM; ++a)
        coopMatLoadNV(xa[a], x_tile, (sub_r + a * 16) * LDV + kk / 8, LDV, false);
      [[unroll]] for (uint c = 0; c < FN; ++c)
        coopMatLoadNV(wb[c], w_tile, (sub_c + c * 16) * LDV + kk / 8, LDV, true);
      [[unroll]] for (uint a = 0; a < FM; ++a)
        [[unroll]] for (uint c = 0; c < FN; ++c) {
          acc[a][c] = coopMatMulAddNV(xa[a], wb[c], acc[a][c]);
        }
    }
  }
  const uint sub_lane = gl_SubgroupInvocationID;
  const uint base = group * 256;
  // Direct stores need 16-byte aligned rows (N a multiple of 4 floats).
  const bool direct = !has_bias && p.n % 4 == 0 && row0 + BM <= p.m && col0 + BN <= p.n;
  [[unroll]] for (uint a = 0; a < FM; ++a) {
    [[unroll]] for (uint c = 0; c < FN; ++c) {
      const uint r0 = row0 + sub_r + a * 16;
      const uint c0 = col0 + sub_c + c * 16;
      if (direct) {  // whole block in range, nothing to add: straight to memory
        coopMatStoreNV(acc[a][c], result, r0 * p.n + c0, p.n, false);
        continue;
      }
      if (r0 >= p.m || c0 >= p.n) continue;  // wholly past the matrix (uniform per subgroup)
      // Through this subgroup's staging fragment: bias added, out-of-range outputs dropped.
      coopMatStoreNV(acc[a][c], stage, base, 16, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = sub_lane; e < 256; e += 32) {
        const uint gr = r0 + e / 16;
        const uint gc = c0 + e % 16;
        if (gr < p.m && gc < p.n) {
#ifdef WEIGHTS_INT8
          result[gr * p.n + gc] = stage[base + e] + BiasAt(gc, p.has_bias);
#else
          result[gr * p.n + gc] = stage[base + e] + (has_bias ? float(bias[gc]) : 0.0);
#endif
        }
      }
      subgroupBarrier();  // the fragment is read before the next one overwrites it
    }
  }
}
