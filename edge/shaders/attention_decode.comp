#version 450
// Causal attention of a few new positions against a cache of qkv rows (decoding), first of two
// passes (flash decoding): query row r is position first + r of a sequence whose qkv holds its
// first + rows rows, and attends to the keys 0 … first + r. One query row leaves a workgroup per
// head far too little to do (16 workgroups on a GPU of 132 SMs, each walking every key), so the
// keys are split into SPLIT-key slices and a workgroup takes one (slice, query row, head):
//   1. scores: groups of PARTS invocations each take a key, every PARTS-th dimension a lane
//      (every PARTS-th 16-byte vector where head_dim is a multiple of 16), their partial dot
//      products summed by subgroup shuffles (as attention.comp does);
//   2. the slice's max and the sum of exp(score − max) by tree reductions in shared memory;
//   3. the unnormalised output: invocation d sums exp(score_j − max) · v_j[d] over the slice
//      (consecutive invocations read consecutive values of a row), UNROLL reads in flight.
// It writes those (head_dim values, then max and sum) to partials[((row·heads + head)·slices +
// slice)·(head_dim + 2)]; attention_decode_combine.comp rescales and adds the slices. A slice
// past a row's last key writes max −FLT_MAX and sum 0, which the combine weighs by 0.
// -DCOMBINE_IN_PLACE: no second dispatch. Each workgroup publishes its slice and counts itself
// in arrivals[row·heads + head] (zero before the dispatch); the one that counts the last slice
// reads them all back (partials is coherent: not from a cache another SM's writes miss), adds
// them as attention_decode_combine.comp does, in the same order, into out, and sets the count
// back to zero for the next dispatch. Bindings 2 and 3 are out and arrivals.
// fp32 throughout; head_dim ≤ MAX_HEAD_DIM (the host refuses larger), the subgroup size a
// multiple of PARTS (the host checks). The push constants are attention.comp's; the slices are
// ceil((first + rows) / SPLIT), the grid {slices, rows · heads}.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "attention_decode.glsl"
#define THREADS 128
#define PARTS 4
#define GROUPS (THREADS / PARTS)
layout(local_size_x = THREADS) in;
#define UNROLL 8  // value reads in flight an invocation
layout(std430, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, binding = 0) readonly buffer Qkv4 { vec4 qkv4[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; uint first; } p;
#ifdef COMBINE_IN_PLACE
layout(std430, binding = 1) coherent buffer Partials { float partials[]; };
layout(std430, binding = 2) writeonly buffer Out { float result[]; };
layout(std430, binding = 3) coherent buffer Arrivals { uint arrivals[]; };
shared bool last_arrival;
#include "attention_decode_add.glsl"
#else
layout(std430, binding = 1) writeonly buffer Partials { float partials[]; };
#endif
shared float q_row[MAX_HEAD_DIM];
shared float scores[SPLIT];
shared float scratch[THREADS];

// The workgroup's max and sum of one value an invocation; every invocation gets the result.
float ReduceMax(float value) {
  const uint tid = gl_LocalInvocationID.x;
  scratch[tid] = value;
  barrier();
  [[unroll]] for (uint width = THREADS / 2; width > 0; width /= 2) {
    if (tid < width) scratch[tid] = max(scratch[tid], scratch[tid + width]);
    barrier();
  }
  const float result = scratch[0];
  barrier();  // read by all before the next reduction writes
  return result;
}
float ReduceSum(float value) {
  const uint tid = gl_LocalInvocationID.x;
  scratch[tid] = value;
  barrier();
  [[unroll]] for (uint width = THREADS / 2; width > 0; width /= 2) {
    if (tid < width) scratch[tid] += scratch[tid + width];
    barrier();
  }
  const float result = scratch[0];
  barrier();
  return result;
}

// This workgroup's slice: its unnormalised output, max and sum into partials.
void WriteSlice() {
  const uint slice = gl_WorkGroupID.x;
  const uint slices = gl_NumWorkGroups.x;
  const uint row = gl_WorkGroupID.y / p.heads;
  const uint h = gl_WorkGroupID.y % p.heads;
  const uint hd = p.head_dim;
  const uint dim = p.heads * hd;
  const uint stride = 3 * dim;  // floats a qkv row
  const uint tid = gl_LocalInvocationID.x;
  const uint position = p.first + row;
  const uint keys = position + 1;
  const uint start = slice * SPLIT;
  const uint count = start < keys ? min(SPLIT, keys - start) : 0;
  const uint out_base = ((row * p.heads + h) * slices + slice) * (hd + 2);
  if (count == 0) {  // (uniform across the workgroup)
    if (tid < hd) partials[out_base + tid] = 0.0;
    if (tid == 0) {
      partials[out_base + hd] = -FLT_MAX;
      partials[out_base + hd + 1] = 0.0;
    }
    return;
  }
  if (tid < hd) q_row[tid] = qkv[position * stride + h * hd + tid] * p.scale;
  barrier();
  // A group's PARTS lanes are consecutive in one subgroup and share j, so the shuffles stay
  // among active lanes.
  const uint group = tid / PARTS;
  const uint part = tid % PARTS;
  for (uint j = group; j < count; j += GROUPS) {
    const uint k_base = (start + j) * stride + dim + h * hd;
    float partial = 0.0;
    if (hd % (4 * PARTS) == 0) {
      // 16-byte reads, a lane every PARTS-th vec4 (k_base is a multiple of 4 here).
      for (uint d = 4 * part; d < hd; d += 4 * PARTS) {
        const vec4 key = qkv4[(k_base + d) / 4];
        partial += dot(vec4(q_row[d], q_row[d + 1], q_row[d + 2], q_row[d + 3]), key);
      }
    } else {
      for (uint d = part; d < hd; d += PARTS) partial += q_row[d] * qkv[k_base + d];
    }
    partial += subgroupShuffleXor(partial, 1);
    partial += subgroupShuffleXor(partial, 2);
    if (part == 0) scores[j] = partial;
  }
  barrier();
  float local_max = -FLT_MAX;
  for (uint j = tid; j < count; j += THREADS) local_max = max(local_max, scores[j]);
  const float slice_max = ReduceMax(local_max);
  float local_sum = 0.0;
  for (uint j = tid; j < count; j += THREADS) {
    const float weight = exp(scores[j] - slice_max);
    scores[j] = weight;
    local_sum += weight;
  }
  // ReduceSum's barriers also publish the weights written above.
  const float slice_sum = ReduceSum(local_sum);
  if (tid < hd) {
    // UNROLL values read before any is used: one at a time, each key waited for its read, and
    // a slice took SPLIT memory latencies in a row (bench/RESULTS.md). The sum's order is kept.
    float sum = 0.0;
    const uint v_base = start * stride + 2 * dim + h * hd + tid;
    uint j = 0;
    for (; j + UNROLL <= count; j += UNROLL) {
      float values[UNROLL];
      [[unroll]] for (uint u = 0; u < UNROLL; ++u) values[u] = qkv[v_base + (j + u) * stride];
      [[unroll]] for (uint u = 0; u < UNROLL; ++u) sum += scores[j + u] * values[u];
    }
    for (; j < count; ++j) sum += scores[j] * qkv[v_base + j * stride];
    partials[out_base + tid] = sum;
  }
  if (tid == 0) {
    partials[out_base + hd] = slice_max;
    partials[out_base + hd + 1] = slice_sum;
  }
}

void main() {
  WriteSlice();
#ifdef COMBINE_IN_PLACE
  const uint row = gl_WorkGroupID.y / p.heads;
  const uint h = gl_WorkGroupID.y % p.heads;
  const uint hd = p.head_dim;
  const uint tid = gl_LocalInvocationID.x;
  const uint slices = gl_NumWorkGroups.x;
  const uint pair = row * p.heads + h;
  // Every invocation's writes to partials are made visible before the count is taken.
  memoryBarrierBuffer();
  barrier();
  if (tid == 0) last_arrival = atomicAdd(arrivals[pair], 1u) == slices - 1;
  barrier();
  if (!last_arrival) return;
  memoryBarrierBuffer();
  if (tid == 0) arrivals[pair] = 0u;  // every other slice has counted itself in
  AddSlices(pair * slices * (hd + 2), slices, hd, tid, row * p.heads * hd + h * hd);
#endif
}
