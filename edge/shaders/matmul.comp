#version 450
// nn.Linear: out[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]). BM×BN output blocks per workgroup of
// 256 invocations (16×16), each computing (BM/16)×(BN/16) outputs in fp32 registers: rows
// ty + 16·i and columns tx + 16·j, so a subgroup's shared-memory reads are broadcasts or
// consecutive words and its global writes are contiguous. K slices of BK are staged in shared
// memory; the next slice's global loads (vec4s where K allows) are issued before the current
// slice is multiplied, so their latency hides behind the arithmetic. Rows, columns and K beyond
// the matrix are staged as zeros and only in-range outputs are written (ragged shapes).
// With -DWEIGHTS_F16 the weights are fp16 in memory and both operands are rounded to fp16 in
// shared memory (fp16 inputs, fp32 products and sums: the tensor-core contract). -DX_F16 (with
// WEIGHTS_F16 or WEIGHTS_INT8) reads x as fp16 in memory too (Backend::MatmulInput, edge/backend.h): the
// same values the fp32 x would have been rounded to in shared memory, at half the traffic.
// With -DWEIGHTS_INT8 the weights are int8 with fp16 scales (edge/shaders/int8.glsl), each
// staged as q · scale in fp32, exact, and x is not rounded (an fp32 x stays fp32; -DX_F16 reads
// an fp16 one): the fp32 matmul on the dequantized weights.
// The block is set by -DBM/-DBN (edge/CMakeLists.txt); the host reads it from edge/shaders.h.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#define BK 16
#define TM (BM / 16)
#define TN (BN / 16)
#define THREADS 256
#define X_VECS (BM * BK / 4 / THREADS)
#define W_VECS (BN * BK / 4 / THREADS)
#if TM * 16 != BM || TN * 16 != BN || X_VECS * 4 * THREADS != BM * BK || \
    W_VECS * 4 * THREADS != BN * BK
#error "block shape: BM and BN must be multiples of 16 of at least 64"
#endif
#ifdef WEIGHTS_INT8
#include "int8.glsl"
#define STYPE float
#elif defined(WEIGHTS_F16)
#define STYPE float16_t
#define WVEC uvec2  // 4 fp16 weights
#else
#define STYPE float
#define WVEC vec4
#endif
#ifdef X_F16
#if !defined(WEIGHTS_F16) && !defined(WEIGHTS_INT8)
#error "X_F16 needs WEIGHTS_F16 or WEIGHTS_INT8: an fp32 matmul must not round x to fp16"
#endif
#define XTYPE float16_t
#define XVEC uvec2  // 4 fp16 inputs
#else
#define XTYPE float
#define XVEC vec4
#endif
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer X { XTYPE x[]; };
layout(std430, binding = 0) readonly buffer X4 { XVEC x4[]; };
#ifndef WEIGHTS_INT8
layout(std430, binding = 1) readonly buffer W { WTYPE w[]; };
layout(std430, binding = 1) readonly buffer W4 { WVEC w4[]; };
layout(std430, binding = 2) readonly buffer Bias { WTYPE bias[]; };
#endif
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
// has_bias: non-zero for a bias; with -DWEIGHTS_INT8 int8.glsl's flags (bit 0 a bias, bit 2 fp16).
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;
shared STYPE x_tile[BK][BM + 4];  // k-major: a k step's rows are consecutive words
shared STYPE w_tile[BK][BN + 4];
vec4 x_next[X_VECS];
vec4 w_next[W_VECS];
uint row0, col0, lane;
bool vectors;
#ifdef WEIGHTS_INT8
uint scale_base, groups;  // int8.glsl's ScaleBase, and a row's scales
#endif

// Four consecutive k of row `row` (x) or column `col` (w) from k0 + kk, zeros outside.
vec4 LoadX(uint row, uint gk) {
  if (row >= p.m) return vec4(0.0);
#ifdef X_F16
  if (vectors) {
    if (gk >= p.k) return vec4(0.0);
    const uvec2 pairs = x4[(row * p.k + gk) / 4];
    return vec4(unpackHalf2x16(pairs.x), unpackHalf2x16(pairs.y));
  }
#else
  if (vectors) return gk < p.k ? x4[(row * p.k + gk) / 4] : vec4(0.0);
#endif
  vec4 v;
  [[unroll]] for (uint j = 0; j < 4; ++j) v[j] = gk + j < p.k ? float(x[row * p.k + gk + j]) : 0.0;
  return v;
}
vec4 LoadW(uint col, uint gk) {
  if (col >= p.n) return vec4(0.0);
#ifdef WEIGHTS_INT8
  // Four consecutive k from a multiple of 4 lie within one group.
  if (vectors) {
    if (gk >= p.k) return vec4(0.0);
    return Bytes4(wq[(col * p.k + gk) / 4]) * ScaleAt(scale_base, col * groups + gk / GROUP);
  }
  vec4 q;
  [[unroll]] for (uint j = 0; j < 4; ++j) {
    q[j] = gk + j < p.k
               ? ByteAt(col * p.k + gk + j) * ScaleAt(scale_base, col * groups + (gk + j) / GROUP)
               : 0.0;
  }
  return q;
#elif defined(WEIGHTS_F16)
  if (vectors) {
    if (gk >= p.k) return vec4(0.0);
    const uvec2 pairs = w4[(col * p.k + gk) / 4];
    return vec4(unpackHalf2x16(pairs.x), unpackHalf2x16(pairs.y));
  }
#else
  if (vectors) return gk < p.k ? w4[(col * p.k + gk) / 4] : vec4(0.0);
#endif
#ifndef WEIGHTS_INT8
  vec4 v;
  [[unroll]] for (uint j = 0; j < 4; ++j) v[j] = gk + j < p.k ? float(w[col * p.k + gk + j]) : 0.0;
  return v;
#endif
}

void Fetch(uint k0) {
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 4);
    x_next[i] = LoadX(row0 + r, k0 + (e - r * (BK / 4)) * 4);
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint c = e / (BK / 4);
    w_next[i] = LoadW(col0 + c, k0 + (e - c * (BK / 4)) * 4);
  }
}

void Stash() {
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 4);
    const uint kk = (e - r * (BK / 4)) * 4;
    [[unroll]] for (uint j = 0; j < 4; ++j) x_tile[kk + j][r] = STYPE(x_next[i][j]);
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint c = e / (BK / 4);
    const uint kk = (e - c * (BK / 4)) * 4;
    [[unroll]] for (uint j = 0; j < 4; ++j) w_tile[kk + j][c] = STYPE(w_next[i][j]);
  }
}

void main() {
  lane = gl_LocalInvocationID.x;
  row0 = gl_WorkGroupID.y * BM;
  col0 = gl_WorkGroupID.x * BN;
  // Every row of x and w then starts 16-byte (fp32) or 8-byte (fp16) aligned: the buffers are
  // bound at offset 0.
  vectors = p.k % 4 == 0;
#ifdef WEIGHTS_INT8
  scale_base = ScaleBase(p.n, p.k);
  groups = (p.k + GROUP - 1) / GROUP;
#endif
  const uint ty = lane / 16;
  const uint tx = lane % 16;
  float acc[TM][TN];
  [[unroll]] for (uint a = 0; a < TM; ++a)
    [[unroll]] for (uint c = 0; c < TN; ++c) acc[a][c] = 0.0;
  Fetch(0);
  for (uint k0 = 0; k0 < p.k; k0 += BK) {
    barrier();  // everyone is done reading the previous slice
    Stash();
    barrier();
    if (k0 + BK < p.k) Fetch(k0 + BK);
    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
      float xa[TM];
      float wb[TN];
      [[unroll]] for (uint a = 0; a < TM; ++a) xa[a] = float(x_tile[kk][ty + 16 * a]);
      [[unroll]] for (uint c = 0; c < TN; ++c) wb[c] = float(w_tile[kk][tx + 16 * c]);
      [[unroll]] for (uint a = 0; a < TM; ++a)
        [[unroll]] for (uint c = 0; c < TN; ++c) acc[a][c] = fma(xa[a], wb[c], acc[a][c]);
    }
  }
  [[unroll]] for (uint c = 0; c < TN; ++c) {
    const uint gc = col0 + tx + 16 * c;
    if (gc >= p.n) continue;
#ifdef WEIGHTS_INT8
    const float b = BiasAt(gc, p.has_bias);
#else
    const float b = p.has_bias != 0 ? float(bias[gc]) : 0.0;
#endif
    [[unroll]] for (uint a = 0; a < TM; ++a) {
      const uint gr = row0 + ty + 16 * a;
      if (gr < p.m) result[gr * p.n + gc] = acc[a][c] + b;
    }
  }
}
