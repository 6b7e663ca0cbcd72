#version 450
// matvec.comp on int8 weights (edge/shaders/int8.glsl): out[M, N] = x[M, K] · w[N, K]ᵀ
// (+ bias[N]), or out += it (LinearAdd), for M ≤ ROWS, w read as q · scale with one fp16 scale
// per GROUP inputs of a row. Decoding reads every weight once a token: int8 halves the bytes
// that fp16 weights take (plus 2 bytes of scale per 32 weights).
//
// The layouts are matvec.comp's, with a read of VEC weights a lane a step:
//  - narrow (CPU devices): 8 columns of 8 lanes, one uint (4 weights) a lane a step;
//  - wide (-DVECTOR_READS, GPUs): 4 columns of 32 lanes, a uvec4 (16 weights, 16 bytes, within
//    one group) a lane a step, four such reads issued before any is used;
//  - wide words (-DWORD_READS): 4 columns of 32 lanes, one uint (4 weights) a lane a step,
//    sixteen reads issued before any is used: the same 64 bytes in flight a lane as wide. A
//    lane's x is then the 4 values beside its neighbours', so a subgroup's x reads are one
//    contiguous 512 bytes (fp32) a read. With 16 weights a read (wide), the lanes' x reads lie
//    64 bytes apart, and each of the four x reads a step touches 2 KiB of cache lines:
//    four times the L1 traffic of the weights' own, for half the weight bytes of fp16.
//  - wide, several columns a subgroup (-DVECTOR_READS -DSUBGROUP_COLUMNS=C, C of 2 or 4): the
//    wide reads, but a column group of 32 lanes computes C consecutive output columns; each x
//    read serves the C rows of weights beside it, so x is read once per C columns. A column
//    past N reads the last row again, and writes nothing.
// Where K is not a multiple of VEC, a lane reads one weight a step (its byte out of the word).
// Each read's VEC products are summed in fp32, then times the group's scale (the same
// products, summed in another order than q·scale·x one by one: fp32's dot-product bound).
// x is fp32, or fp16 in memory with -DX_F16 (Backend::MatmulInput); it is not rounded. Sums
// and the epilogue are fp32, as matvec.comp's: the product rounded to fp32, then added to out
// (FLAG_ADD) as elementwise.comp's Add adds. Workgroups past the dispatch's x extent continue
// in y. FLAG_NORM, FLAG_SILU and out_offset fold decoding's ops into it as in matvec.comp; the
// norm weight (binding 4) is an ordinary weight, read as the bias is (int8.glsl).
#extension GL_EXT_control_flow_attributes : require
#include "int8.glsl"
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
#define IN_FLIGHT 4  // uvec4 reads a lane issues before using them (wide; 4× as many words)
#ifdef VECTOR_READS
#define VEC 16
#define READS_IN_FLIGHT IN_FLIGHT
#elif defined(WORD_READS)
#define VEC 4
#define READS_IN_FLIGHT (4 * IN_FLIGHT)
#else
#define VEC 4
#define READS_IN_FLIGHT 1
#endif
#define QUADS (VEC / 4)  // vec4s of weights a read
layout(local_size_x = THREADS) in;
#include "matvec_lanes.glsl"
// x: fp32 as floats and vec4s, or fp16 as uints of 2 halves and uvec2s of 4.
#ifdef X_F16
layout(std430, binding = 0) readonly buffer X { uint x_pairs[]; };
layout(std430, binding = 0) readonly buffer X4 { uvec2 x_quads[]; };
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x_quads[]; };
#endif
// Out is read as well where FLAG_ADD asks to add into it.
layout(std430, binding = 3) buffer Out { float result[]; };
// The norm weight FLAG_NORM multiplies x by: an ordinary weight, read as int8.glsl reads the bias.
layout(std430, binding = 4) readonly buffer NormWords { uint norm_words[]; };
layout(std430, binding = 4) readonly buffer NormPairs { uvec2 norm_pairs[]; };  // 4 halves
layout(std430, binding = 4) readonly buffer NormQuads { vec4 norm_quads[]; };   // 4 floats
// Element `index` of the norm weight, and its four from element 4·quad on.
float NormAt(uint index, uint flags) {
  if ((flags & FLAG_BIAS_HALF) == 0u) return uintBitsToFloat(norm_words[index]);
  const vec2 pair = unpackHalf2x16(norm_words[index / 2u]);
  return (index & 1u) != 0u ? pair.y : pair.x;
}
vec4 NormQuad(uint quad, uint flags) {
  if ((flags & FLAG_BIAS_HALF) == 0u) return norm_quads[quad];
  const uvec2 halves = norm_pairs[quad];
  return vec4(unpackHalf2x16(halves.x), unpackHalf2x16(halves.y));
}
layout(push_constant) uniform Push {
  uint m, n, k, flags;
  uint out_offset;  // floats before row 0 of out
  float eps;        // FLAG_NORM's
} p;
#include "matvec_epilogue.glsl"

// The VEC weights from element VEC·index on, as read: kept packed while in flight (4 registers a
// read, not 16) and made floats by QuadOf where they are used. A plain vector, not a struct, and
// its words picked by constant components, never indexed by a variable: the driver kept an
// array of structs indexed so in local memory (its statistics showed 112 bytes of it a lane).
#ifdef VECTOR_READS
#define Read uvec4
Read Weights(uint index) { return wq4[index]; }
#else
#define Read uint
Read Weights(uint index) { return wq[index]; }
#endif
// Weights 4·j … 4·j + 3 of a read, as signed bytes in fp32.
vec4 QuadOf(Read read, uint j) {
#ifdef VECTOR_READS
  return Bytes4(j == 0u ? read.x : j == 1u ? read.y : j == 2u ? read.z : read.w);
#else
  return Bytes4(read);
#endif
}
// Four inputs from element 4·index on.
vec4 Quad(uint index) {
#ifdef X_F16
  const uvec2 pairs = x_quads[index];
  return vec4(unpackHalf2x16(pairs.x), unpackHalf2x16(pairs.y));
#else
  return x_quads[index];
#endif
}
float XValue(uint index) {
#ifdef X_F16
  const vec2 pair = unpackHalf2x16(x_pairs[index / 2u]);
  return (index & 1u) != 0u ? pair.y : pair.x;
#else
  return x[index];
#endif
}

// Four fp32 inputs as they are and the norm weight's four at the same place (FLAG_NORM).
vec4 NormedQuad(uint x_quad, uint weight_quad, inout float square) {
  const vec4 quad = Quad(x_quad);
  square += dot(quad, quad);
  return quad * NormQuad(weight_quad, p.flags);
}

// Read `at` of the slot's columns against row r's x: each column's VEC products summed in fp32
// (x times the norm weight with FLAG_NORM, its squares added to `square`).
void ReadDots(uint r, uint at, Read weights[NC], bool norm, inout float square, out float dots[NC]) {
  const uint x_quad = (r * p.k + at * VEC) / 4;
  const uint weight_quad = at * VEC / 4;
  [[unroll]] for (uint c = 0; c < NC; ++c) dots[c] = 0.0;
  [[unroll]] for (uint j = 0; j < QUADS; ++j) {
    const vec4 quad = norm ? NormedQuad(x_quad + j, weight_quad + j, square) : Quad(x_quad + j);
    [[unroll]] for (uint c = 0; c < NC; ++c) dots[c] += dot(QuadOf(weights[c], j), quad);
  }
}

void main() {
  const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint slot = MatvecSlot();
  const uint lane = MatvecLane();
  const uint first = (group * COLUMNS + slot) * NC;  // the slot's first column
  const bool in_range = first < p.n;
  const uint scale_base = ScaleBase(p.n, p.k);
  const uint groups = (p.k + GROUP - 1) / GROUP;  // a row's scales
  const bool norm = (p.flags & FLAG_NORM) != 0u;
  // The slot's columns, the last row standing in for those past N (read, never written).
  uint columns[NC];
  [[unroll]] for (uint c = 0; c < NC; ++c) columns[c] = min(first + c, p.n - 1u);
  float sums[NC][ROWS], squares[ROWS];  // the products a column; x² for FLAG_NORM
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] = 0.0;
    squares[r] = 0.0;
  }
  if (in_range && p.k % VEC == 0) {
    // Every row starts on a read's boundary (the buffer is bound at offset 0), and a read lies
    // within one group (GROUP is a multiple of VEC).
    const uint reads = p.k / VEC;  // a row's
    // A lane's reads are added in the order of their index, `lane`, `lane + LANES`, …, in both
    // loops, whatever READS_IN_FLIGHT and NC are. The reads in flight are used under no
    // condition: glslc left the loop that guarded each read rolled, so the arrays of reads and
    // scales were indexed by a variable, and the driver held them in local memory
    // (bench/RESULTS.md, calls E7 and E8).
    uint v = lane;
    // Whole rounds: READS_IN_FLIGHT reads a lane and column, all issued before any is used.
    for (; v + (READS_IN_FLIGHT - 1) * LANES < reads; v += READS_IN_FLIGHT * LANES) {
      Read weights[READS_IN_FLIGHT][NC];
      float scales[READS_IN_FLIGHT][NC];
      [[unroll]] for (uint i = 0; i < READS_IN_FLIGHT; ++i) {
        [[unroll]] for (uint c = 0; c < NC; ++c) {
          weights[i][c] = Weights(columns[c] * reads + v + i * LANES);
          scales[i][c] = ScaleAt(0u, scale_base * 2u + columns[c] * groups +
                                         (v + i * LANES) * VEC / GROUP);
        }
      }
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) {
          [[unroll]] for (uint i = 0; i < READS_IN_FLIGHT; ++i) {
            float dots[NC];
            ReadDots(r, v + i * LANES, weights[i], norm, squares[r], dots);
            [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] += dots[c] * scales[i][c];
          }
        }
      }
    }
    // The rest of the row: one read a lane at a time.
    for (; v < reads; v += LANES) {
      Read weights[NC];
      float scales[NC];
      [[unroll]] for (uint c = 0; c < NC; ++c) {
        weights[c] = Weights(columns[c] * reads + v);
        scales[c] = ScaleAt(0u, scale_base * 2u + columns[c] * groups + v * VEC / GROUP);
      }
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) {
          float dots[NC];
          ReadDots(r, v, weights, norm, squares[r], dots);
          [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] += dots[c] * scales[c];
        }
      }
    }
  } else if (in_range) {
    for (uint kk = lane; kk < p.k; kk += LANES) {
      float weight[NC];
      [[unroll]] for (uint c = 0; c < NC; ++c) {
        weight[c] = ByteAt(columns[c] * p.k + kk) *
                    ScaleAt(scale_base, columns[c] * groups + kk / GROUP);
      }
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < p.m) {
          float value_x = XValue(r * p.k + kk);
          if (norm) {
            squares[r] += value_x * value_x;
            value_x *= NormAt(kk, p.flags);
          }
          [[unroll]] for (uint c = 0; c < NC; ++c) sums[c][r] += weight[c] * value_x;
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
      StoreColumn(total, square_total, BiasAt(first + c, p.flags), lane, first + c);
    }
  }
}
