#version 450
// A chain of matvecs, each stage's input the last one's output (bench/edge_matvec_chain.h):
// decoding's projections one after another, as a persistent kernel would run them, beside the
// same stages as one dispatch each. Stage s computes y[r] = Σ_k W_s[r, k] · x[k] for its n rows,
// reading the first k values of the last stage's output (x ping-pongs between two halves of one
// buffer: stage s reads half s % 2 and writes the other).
//
// A subgroup (a "team") computes two rows at a time, its lanes each reading one 16-byte vector
// of each row a step, IN_FLIGHT steps issued before any is used, as matvec.comp's wide layout
// with 2 columns a subgroup does; the lanes' sums are added by shuffles. K must be whole rounds
// (VEC · lanes · IN_FLIGHT), which the host checks. Weights are fp16, or int8 (-DWEIGHTS_INT8)
// with one fp32 scale a row (the runtime's int8 has one fp16 scale per 32 weights: 1/16 more
// bytes, not read here). x and the sums are fp32.
//
// The dispatch runs stages p.first … p.first + p.count − 1, its teams walking each stage's row
// pairs in a grid stride. One stage a dispatch is today's decoding: the pipeline barrier between
// dispatches orders them. With -DPERSISTENT one dispatch runs them all, its workgroups meeting
// at a grid-wide barrier (grid_barrier.glsl) between stages; the host sizes the grid so that
// they all run at once. With -DPREFETCH too, each team issues its first reads of the next stage's
// weights before that barrier: weights do not depend on the input, so their memory round trip
// overlaps the wait. The sums are the same bits in every variant: a row's terms are added in
// the same order whichever team computes it.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
layout(local_size_x = 128) in;
#define IN_FLIGHT 4
#ifdef WEIGHTS_INT8
#define VEC 16  // weights a 16-byte read
#else
#define VEC 8
#endif

struct Stage {
  uint n, k;     // rows, and inputs a row
  uint weights;  // its first 16-byte vector in W
  uint scales;   // its first row's scale (int8)
};
layout(std430, binding = 0) readonly buffer Stages { Stage stages[]; };
layout(std430, binding = 1) readonly buffer W { uvec4 w4[]; };
layout(std430, binding = 2) readonly buffer Scales { float scales[]; };
layout(std430, binding = 3) coherent buffer X { vec4 x4[]; };
layout(std430, binding = 3) coherent buffer XFloats { float x[]; };
layout(push_constant) uniform Push {
  uint first, count;  // the stages this dispatch runs
  uint span;          // floats in each half of x (a multiple of 4)
  uint base;          // arrivals counted before this dispatch
  uint groups;        // the arrivals each grid-wide barrier waits for: the dispatch's workgroups
  uint spin_limit;    // reads of the count before a spin gives up
} p;
#define GRID_BARRIER_BINDING 4  // over every dispatch since the host zeroed it
#include "grid_barrier.glsl"

// Four inputs from element 4·quad of the half at `half_base` (a multiple of 4).
vec4 Quad(uint half_base, uint quad) { return x4[half_base / 4u + quad]; }

#ifdef WEIGHTS_INT8
// The four signed bytes of a word in fp32, the lowest first (edge/shaders/int8.glsl's trick).
vec4 Bytes4(uint word) {
  const uvec4 biased = (uvec4(word ^ 0x80808080u) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu;
  return uintBitsToFloat(biased | 0x4B000000u) - 8388736.0;
}
// One read's 16 products with x from element 16·v on.
float ReadDot(uvec4 read, uint half_base, uint v) {
  const uint q = v * 4u;
  return dot(Bytes4(read.x), Quad(half_base, q)) + dot(Bytes4(read.y), Quad(half_base, q + 1u)) +
         dot(Bytes4(read.z), Quad(half_base, q + 2u)) + dot(Bytes4(read.w), Quad(half_base, q + 3u));
}
#else
// One read's 8 products with x from element 8·v on.
float ReadDot(uvec4 read, uint half_base, uint v) {
  const vec4 low = vec4(unpackHalf2x16(read.x), unpackHalf2x16(read.y));
  const vec4 high = vec4(unpackHalf2x16(read.z), unpackHalf2x16(read.w));
  return dot(low, Quad(half_base, v * 2u)) + dot(high, Quad(half_base, v * 2u + 1u));
}
#endif

// The reads of one round of a row pair: lane's vectors v, v + lanes, … of rows r0 and r1.
void LoadRound(Stage stage, uint r0, uint r1, uint v, uint lanes, out uvec4 reads[2][IN_FLIGHT]) {
  const uint row_vectors = stage.k / VEC;
  [[unroll]] for (uint i = 0u; i < IN_FLIGHT; ++i) {
    reads[0][i] = w4[stage.weights + r0 * row_vectors + v + i * lanes];
    reads[1][i] = w4[stage.weights + r1 * row_vectors + v + i * lanes];
  }
}

void main() {
  const uint lanes = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
  const uint teams = gl_NumSubgroups;
  const uint first_pair = gl_WorkGroupID.x * teams + gl_SubgroupID;
  const uint pair_stride = gl_NumWorkGroups.x * teams;
  uvec4 early[2][IN_FLIGHT];  // the next stage's first round, read before the barrier (PREFETCH)
  bool have_early = false;
  const uint last = p.first + p.count - 1u;
  for (uint s = p.first; s <= last; ++s) {
    const Stage stage = stages[s];
    const uint in_half = (s & 1u) * p.span, out_half = ((s + 1u) & 1u) * p.span;
    const uint row_vectors = stage.k / VEC;
    for (uint pair = first_pair; pair * 2u < stage.n; pair += pair_stride) {
      const uint r0 = pair * 2u, r1 = min(r0 + 1u, stage.n - 1u);  // r1 = r0 for an odd last row
      float sum0 = 0.0, sum1 = 0.0;
      for (uint v = lane; v < row_vectors; v += IN_FLIGHT * lanes) {
        uvec4 reads[2][IN_FLIGHT];
        if (have_early) {
          reads = early;
          have_early = false;
        } else {
          LoadRound(stage, r0, r1, v, lanes, reads);
        }
        [[unroll]] for (uint i = 0u; i < IN_FLIGHT; ++i) {
          sum0 += ReadDot(reads[0][i], in_half, v + i * lanes);
          sum1 += ReadDot(reads[1][i], in_half, v + i * lanes);
        }
      }
      for (uint width = lanes / 2u; width > 0u; width /= 2u) {
        sum0 += subgroupShuffleXor(sum0, width);
        sum1 += subgroupShuffleXor(sum1, width);
      }
#ifdef WEIGHTS_INT8
      sum0 *= scales[stage.scales + r0];
      sum1 *= scales[stage.scales + r1];
#endif
      if (lane == 0u) {
        x[out_half + r0] = sum0;
        if (r1 != r0) x[out_half + r1] = sum1;
      }
    }
#ifdef PERSISTENT
    if (s < last) {
#ifdef PREFETCH
      const Stage next = stages[s + 1u];
      if (first_pair * 2u < next.n) {
        LoadRound(next, first_pair * 2u, min(first_pair * 2u + 1u, next.n - 1u), lane, lanes,
                  early);
        have_early = true;
      }
#endif
      if (!GridBarrier(p.base + (s - p.first + 1u) * p.groups)) return;
    }
#endif
  }
}
