#version 450
// nn.Linear for a few rows, as decoding runs it (one new position a step): out[M, N] =
// x[M, K] · w[N, K]ᵀ (+ bias[N]) for M ≤ ROWS. A workgroup computes COLUMNS output columns for
// every row, LANES invocations a column, and adds the lanes' partial sums (matvec_lanes.glsl).
// The tiled shader's block would spend its whole BM rows of work on one row and its grid would
// hold a few workgroups.
//
// Decoding reads every weight once a token, so on a GPU this shader is bound by how many bytes
// it keeps in flight. Two layouts are built (VulkanOptions::matvec_layout):
//  - narrow: 8 columns of 8 lanes, one element a lane a step. It ran fastest on lavapipe, but
//    read the seed model's weights at 134 GB/s on the H200 (bench/RESULTS.md).
//  - wide (-DVECTOR_READS, 4 columns of 32 lanes): where K is a multiple of 8, a lane reads 8
//    consecutive weights at a time (16 bytes in fp16), four such reads issued before any is
//    used, so that a column's lanes cover 512 consecutive bytes a read; four times the
//    invocations and far more bytes in flight. A K not a multiple of 8 takes the narrow one's
//    element loop. On lavapipe the vector reads ran slower (unpacking halves on the CPU).
//  - wide, several columns a subgroup (-DVECTOR_READS -DSUBGROUP_COLUMNS=C, C of 2 or 4): the
//    wide reads, but a column group of 32 lanes computes C consecutive output columns, each x
//    read (and, with FLAG_NORM, its square and norm weight) serving the C rows of weights beside
//    it. Each column's products are added in the wide layout's order: the same bits. A column
//    past N reads the last row again, and writes nothing.
//
// Numerics as matmul.comp: with -DWEIGHTS_F16 x is rounded to fp16 (-DX_F16: it is fp16 in
// memory already), the products and sums fp32. Workgroups past the dispatch's x extent continue
// in y (gl_WorkGroupID.y · gl_NumWorkGroups.x), for vocabularies above the device's limit.
//
// Decoding folds the ops around a projection into it (Backend::FusedLinear), each a flag
// (applied at the column's end by matvec_epilogue.glsl, which matvec_int8.comp shares):
//  - FLAG_NORM: x is the fp32 residual and the product is RMSNorm(x) · wᵀ. Every column's lanes
//    read all of x for their dot products anyway, so they also sum x² and multiply x by the norm
//    weight (binding 4) as they read it; the column's sum is then scaled by rsqrt(mean(x²) + eps).
//    x is not rounded to fp16 here (RmsNorm's fp16 output was): fp32 products of the same terms.
//  - FLAG_SILU: out = silu(product + bias), as elementwise.comp's SiLU computes it.
//  - FLAG_ADD: out += product (+ bias), the residual add.
// and out_offset (floats) places the rows in out (decoding's qkv straight into the cache).
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#ifndef COLUMNS
#define COLUMNS 8
#endif
#ifndef LANES
#define LANES 8
#endif
#ifndef SUBGROUP_COLUMNS
#define SUBGROUP_COLUMNS 1
#endif
#define NC SUBGROUP_COLUMNS  // output columns a column group computes (its "slot")
#define THREADS (COLUMNS * LANES)
#define ROWS 4
#define IN_FLIGHT 4  // vector reads a lane issues before using them
#ifdef VECTOR_READS
const bool kVectorReads = true;
#else
const bool kVectorReads = false;
#endif
#ifdef X_F16
#define XTYPE float16_t
#else
#define XTYPE float
#endif
layout(local_size_x = THREADS) in;
#include "matvec_lanes.glsl"
// Each buffer is also read as 16-byte vectors (the same binding, another view).
layout(std430, binding = 0) readonly buffer X { XTYPE x[]; };
#ifdef X_F16
layout(std430, binding = 0) readonly buffer XVectors { uvec4 x_vectors[]; };  // 8 halves each
#else
layout(std430, binding = 0) readonly buffer XVectors { vec4 x_vectors[]; };  // 4 floats each
#endif
layout(std430, binding = 1) readonly buffer W { WTYPE w[]; };
#ifdef WEIGHTS_F16
layout(std430, binding = 1) readonly buffer WVectors { uvec4 w_vectors[]; };
#else
layout(std430, binding = 1) readonly buffer WVectors { vec4 w_vectors[]; };
#endif
layout(std430, binding = 2) readonly buffer Bias { WTYPE bias[]; };
// Out is read as well where FLAG_ADD asks to add into it.
layout(std430, binding = 3) buffer Out { float result[]; };
// The norm weight FLAG_NORM multiplies x by, and its 8-element view.
layout(std430, binding = 4) readonly buffer Norm { WTYPE norm_weight[]; };
#ifdef WEIGHTS_F16
layout(std430, binding = 4) readonly buffer NormVectors { uvec4 norm_vectors[]; };
#else
layout(std430, binding = 4) readonly buffer NormVectors { vec4 norm_vectors[]; };
#endif
// kFlag* in edge/vulkan_backend.cc.
#define FLAG_BIAS 1u
#define FLAG_ADD 2u
#define FLAG_NORM 8u
#define FLAG_SILU 16u
layout(push_constant) uniform Push {
  uint m, n, k, flags;
  uint out_offset;  // floats before row 0 of out
  float eps;        // FLAG_NORM's
} p;
#include "matvec_epilogue.glsl"

// Eight consecutive elements, from element 8·index, as two vec4.
struct Eight {
  vec4 low, high;
};
#if defined(WEIGHTS_F16) || defined(X_F16)
Eight Unpack(uvec4 halves) {
  return Eight(vec4(unpackHalf2x16(halves.x), unpackHalf2x16(halves.y)),
               vec4(unpackHalf2x16(halves.z), unpackHalf2x16(halves.w)));
}
#endif
// Eight weights as read: fp16 ones kept packed while in flight (4 registers, not 8) and
// unpacked by Open where they are used.
struct Packed {
#ifdef WEIGHTS_F16
  uvec4 halves;
#else
  vec4 low, high;
#endif
};
Packed Weights(uint index) {
#ifdef WEIGHTS_F16
  return Packed(w_vectors[index]);
#else
  return Packed(w_vectors[2 * index], w_vectors[2 * index + 1]);
#endif
}
Eight Open(Packed packed) {
#ifdef WEIGHTS_F16
  return Unpack(packed.halves);
#else
  return Eight(packed.low, packed.high);
#endif
}
Eight Inputs(uint index) {
#ifdef X_F16
  return Unpack(x_vectors[index]);
#elif defined(WEIGHTS_F16)
  return Eight(vec4(f16vec4(x_vectors[2 * index])), vec4(f16vec4(x_vectors[2 * index + 1])));
#else
  return Eight(x_vectors[2 * index], x_vectors[2 * index + 1]);
#endif
}

// Eight fp32 inputs as they are (FLAG_NORM reads the residual unrounded).
Eight RawInputs(uint index) {
#ifdef X_F16
  return Unpack(x_vectors[index]);
#else
  return Eight(x_vectors[2 * index], x_vectors[2 * index + 1]);
#endif
}
Eight NormWeights(uint index) {
#ifdef WEIGHTS_F16
  return Unpack(norm_vectors[index]);
#else
  return Eight(norm_vectors[2 * index], norm_vectors[2 * index + 1]);
#endif
}

float XValue(uint index) {
#if defined(WEIGHTS_F16) && !defined(X_F16)
  return float(float16_t(x[index]));
#else
  return float(x[index]);
#endif
}

// Eight inputs of row r from element 8·index on, as the products read them: with FLAG_NORM the
// fp32 residual times the norm weight, its squares added to `square`.
Eight ProductInputs(uint r, uint vectors, uint index, bool norm, inout float square) {
  if (!norm) return Inputs(r * vectors + index);
  Eight inputs = RawInputs(r * vectors + index);
  square += dot(inputs.low, inputs.low) + dot(inputs.high, inputs.high);
  const Eight g = NormWeights(index);
  inputs.low *= g.low;
  inputs.high *= g.high;
  return inputs;
}

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint slot = MatvecSlot();
  const uint lane = MatvecLane();
  const uint first = (group * COLUMNS + slot) * NC;  // the slot's first column
  const bool in_range = first < p.n;
  const bool norm = (p.flags & FLAG_NORM) != 0u;
  // The slot's columns, the last row standing in for those past N (read, never written).
  uint columns[NC];
  [[unroll]] for (uint c = 0; c < NC; ++c) columns[c] = min(first + c, p.n - 1u);
  float sums[NC][ROWS], squares[ROWS];  // the products a column; x² for FLAG_NORM
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] = 0.0;
    squares[r] = 0.0;
  }
  if (in_range && kVectorReads && p.k % 8 == 0) {
    const uint vectors = p.k / 8;  // a row's, of 8 elements each
    uint v = lane;
    for (; v + (IN_FLIGHT - 1) * LANES < vectors; v += IN_FLIGHT * LANES) {
      Packed weights[NC][IN_FLIGHT];
      [[unroll]] for (uint c = 0; c < NC; ++c) {
        [[unroll]] for (uint i = 0; i < IN_FLIGHT; ++i) {
          weights[c][i] = Weights(columns[c] * vectors + v + i * LANES);
        }
      }
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) {
          [[unroll]] for (uint i = 0; i < IN_FLIGHT; ++i) {
            const Eight inputs = ProductInputs(r, vectors, v + i * LANES, norm, squares[r]);
            [[unroll]] for (uint c = 0; c < NC; ++c) {
              const Eight w8 = Open(weights[c][i]);
              sums[c][r] += dot(w8.low, inputs.low) + dot(w8.high, inputs.high);
            }
          }
        }
      }
    }
    for (; v < vectors; v += LANES) {
      Eight weights[NC];
      [[unroll]] for (uint c = 0; c < NC; ++c) weights[c] = Open(Weights(columns[c] * vectors + v));
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) {
          const Eight inputs = ProductInputs(r, vectors, v, norm, squares[r]);
          [[unroll]] for (uint c = 0; c < NC; ++c) {
            sums[c][r] += dot(weights[c].low, inputs.low) + dot(weights[c].high, inputs.high);
          }
        }
      }
    }
  } else if (in_range) {
    for (uint kk = lane; kk < p.k; kk += LANES) {
      float weight[NC];
      [[unroll]] for (uint c = 0; c < NC; ++c) weight[c] = float(w[columns[c] * p.k + kk]);
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) {
          if (norm) {
            const float value_x = float(x[r * p.k + kk]);
            squares[r] += value_x * value_x;
            const float normed = value_x * float(norm_weight[kk]);
            [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] += weight[c] * normed;
          } else {
            const float value_x = XValue(r * p.k + kk);
            [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] += weight[c] * value_x;
          }
        }
      }
    }
  }
  float square_total = 0.0;
  if (norm) square_total = SumOverLanes(squares, p.m, slot, lane);  // uniform
  [[unroll]] for (uint c = 0; c < NC; ++c) {
    // The shared-memory path's partials are read before they are written again (uniform).
    if (!LanesInSubgroup() && (norm || c > 0)) barrier();
    const float total = SumOverLanes(sums[c], p.m, slot, lane);
    if (in_range && first + c < p.n && lane < p.m) {
      const float column_bias = (p.flags & FLAG_BIAS) != 0u ? float(bias[first + c]) : 0.0;
      StoreColumn(total, square_total, column_bias, lane, first + c);
    }
  }
}
