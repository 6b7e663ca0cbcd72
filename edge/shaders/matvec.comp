#version 450
// nn.Linear for a few rows, as decoding runs it (one new position a step): out[M, N] =
// x[M, K] · w[N, K]ᵀ (+ bias[N]) for M ≤ ROWS. A workgroup computes COLUMNS output columns for
// every row, LANES invocations a column: they read every LANES-th element of the column's weight
// row (consecutive words across the lanes) and add their partial sums in shared memory. The
// tiled shader's block would spend its whole BM rows of work on one row and its grid would hold
// a few workgroups. On lavapipe 8 columns of 8 lanes ran a 256-wide model's decoding at 73
// tokens/s, a column of 64 lanes at 27, 8 of 32 at 45, 64 of 4 at 79 (bench/RESULTS.md); 8 lanes
// keep 16 consecutive bytes of fp16 weights a read on a GPU.
// Numerics as matmul.comp: with -DWEIGHTS_F16 x is rounded to fp16 (-DX_F16: it is fp16 in
// memory already), the products and sums fp32. Workgroups past the dispatch's x extent continue
// in y (gl_WorkGroupID.y · gl_NumWorkGroups.x), for vocabularies above the device's limit.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define COLUMNS 8
#define LANES 8
#define THREADS (COLUMNS * LANES)
#define ROWS 4
#ifdef X_F16
#define XTYPE float16_t
#else
#define XTYPE float
#endif
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer X { XTYPE x[]; };
layout(std430, binding = 1) readonly buffer W { WTYPE w[]; };
layout(std430, binding = 2) readonly buffer Bias { WTYPE bias[]; };
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;
shared float partial[ROWS][THREADS];  // [row][column · LANES + lane]

float XValue(uint index) {
#if defined(WEIGHTS_F16) && !defined(X_F16)
  return float(float16_t(x[index]));
#else
  return float(x[index]);
#endif
}

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint slot = gl_LocalInvocationID.x / LANES;
  const uint lane = gl_LocalInvocationID.x % LANES;
  const uint column = group * COLUMNS + slot;
  const bool in_range = column < p.n;
  float sums[ROWS];
  [[unroll]] for (uint r = 0; r < ROWS; ++r) sums[r] = 0.0;
  if (in_range) {
    for (uint kk = lane; kk < p.k; kk += LANES) {
      const float weight = float(w[column * p.k + kk]);
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) sums[r] += weight * XValue(r * p.k + kk);
      }
    }
  }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) partial[r][gl_LocalInvocationID.x] = sums[r];
  barrier();
  [[unroll]] for (uint width = LANES / 2; width > 0; width /= 2) {
    if (lane < width) {
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        partial[r][gl_LocalInvocationID.x] += partial[r][gl_LocalInvocationID.x + width];
      }
    }
    barrier();
  }
  if (in_range && lane < p.m) {
    const float b = p.has_bias != 0 ? float(bias[column]) : 0.0;
    result[lane * p.n + column] = partial[lane][slot * LANES] + b;
  }
}
