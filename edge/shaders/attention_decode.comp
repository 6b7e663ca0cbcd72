#version 450
// Causal attention of a few new positions against a cache of qkv rows (decoding): query row r
// is position first + r of a sequence whose qkv holds its first + rows rows, and attends to
// the keys 0 … first + r. attention.comp gives a workgroup 64 queries that share each tile of K
// and V; one new position a token would leave 4 of its 256 invocations working, one after the
// other through every key. Here a workgroup takes one (query row, head) and spreads the keys
// over its invocations, CHUNK keys at a time:
//   1. scores: groups of PARTS invocations each take a key, every PARTS-th dimension a lane,
//      their partial dot products summed by subgroup shuffles (as attention.comp does);
//   2. softmax over the chunk against a running max (the chunk's max and sum by tree reductions
//      in shared memory), the earlier chunks' sum and output rescaled;
//   3. the output: invocation d sums p_j · v_j[d] over the chunk (consecutive invocations read
//      consecutive values of a row).
// fp32 throughout; head_dim ≤ MAX_HEAD_DIM (the host refuses larger), the subgroup size a
// multiple of PARTS (the host checks). The push constants are attention.comp's.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#define THREADS 128
#define PARTS 4
#define GROUPS (THREADS / PARTS)
#define CHUNK 1024
#define MAX_HEAD_DIM 128
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; uint first; } p;
shared float q_row[MAX_HEAD_DIM];
shared float scores[CHUNK];
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

void main() {
  const uint row = gl_WorkGroupID.x;
  const uint h = gl_WorkGroupID.y;
  const uint hd = p.head_dim;
  const uint dim = p.heads * hd;
  const uint stride = 3 * dim;  // floats a qkv row
  const uint tid = gl_LocalInvocationID.x;
  const uint group = tid / PARTS;
  const uint part = tid % PARTS;
  const uint position = p.first + row;
  const uint keys = position + 1;
  if (tid < hd) q_row[tid] = qkv[position * stride + h * hd + tid] * p.scale;
  barrier();
  float running_max = -3.402823466e38;
  float running_sum = 0.0;
  float acc = 0.0;  // output dimension tid, where tid < head_dim
  for (uint start = 0; start < keys; start += CHUNK) {
    const uint count = min(CHUNK, keys - start);
    // A group's PARTS lanes are consecutive in one subgroup and share j, so the shuffles stay
    // among active lanes.
    for (uint j = group; j < count; j += GROUPS) {
      const uint k_base = (start + j) * stride + dim + h * hd;
      float partial = 0.0;
      for (uint d = part; d < hd; d += PARTS) partial += q_row[d] * qkv[k_base + d];
      partial += subgroupShuffleXor(partial, 1);
      partial += subgroupShuffleXor(partial, 2);
      if (part == 0) scores[j] = partial;
    }
    barrier();
    float local_max = -3.402823466e38;
    for (uint j = tid; j < count; j += THREADS) local_max = max(local_max, scores[j]);
    const float new_max = max(running_max, ReduceMax(local_max));
    float local_sum = 0.0;
    for (uint j = tid; j < count; j += THREADS) {
      const float weight = exp(scores[j] - new_max);
      scores[j] = weight;
      local_sum += weight;
    }
    // ReduceSum's barriers also publish the weights written above.
    const float chunk_sum = ReduceSum(local_sum);
    const float rescale = exp(running_max - new_max);
    running_sum = running_sum * rescale + chunk_sum;
    if (tid < hd) {
      float sum = acc * rescale;
      const uint v_base = start * stride + 2 * dim + h * hd + tid;
      for (uint j = 0; j < count; ++j) sum += scores[j] * qkv[v_base + j * stride];
      acc = sum;
    }
    running_max = new_max;
    barrier();  // every weight read before the next chunk's scores overwrite them
  }
  if (tid < hd) result[row * dim + h * hd + tid] = acc / running_sum;
}
