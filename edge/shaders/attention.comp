#version 450
// Multi-head attention on nn.MultiheadAttention's packed qkv[batch, seq, 3·dim]:
// out[b, i, h] = Σ_j softmax_j(q_i·k_j/√head_dim) v_j, over j ≤ i when causal. Online softmax
// (a running max and sum, rescaled as keys arrive), so no [seq, seq] matrix exists. One
// invocation per query row; the workgroup's 64 queries share each 32-key tile of K and V
// in shared memory. head_dim ≤ 128 (the host refuses larger).
#include "common.glsl"
#define QUERIES 64
#define KEYS 32
#define MAX_HEAD_DIM 128
layout(local_size_x = QUERIES) in;
layout(std430, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; } p;
shared float k_tile[KEYS * MAX_HEAD_DIM];
shared float v_tile[KEYS * MAX_HEAD_DIM];
void main() {
  const uint dim = p.heads * p.head_dim;
  const uint bh = gl_WorkGroupID.y;
  const uint b = bh / p.heads;
  const uint h = bh - b * p.heads;
  const uint lane = gl_LocalInvocationID.x;
  const uint first_query = gl_WorkGroupID.x * QUERIES;
  const uint i = first_query + lane;
  const bool in_range = i < p.seq;
  float q[MAX_HEAD_DIM];
  float acc[MAX_HEAD_DIM];
  const uint q_base = (b * p.seq + min(i, p.seq - 1)) * 3 * dim + h * p.head_dim;
  for (uint d = 0; d < p.head_dim; ++d) {
    q[d] = qkv[q_base + d] * p.scale;
    acc[d] = 0.0;
  }
  float running_max = -3.402823466e38;
  float running_sum = 0.0;
  const uint last_query = min(first_query + QUERIES, p.seq) - 1;
  const uint key_end = p.causal != 0 ? last_query + 1 : p.seq;
  for (uint tile = 0; tile < key_end; tile += KEYS) {
    barrier();
    for (uint e = lane; e < KEYS * p.head_dim; e += QUERIES) {
      const uint kk = e / p.head_dim;
      const uint d = e - kk * p.head_dim;
      const uint j = tile + kk;
      if (j < p.seq) {
        const uint row = (b * p.seq + j) * 3 * dim + h * p.head_dim + d;
        k_tile[kk * p.head_dim + d] = qkv[row + dim];
        v_tile[kk * p.head_dim + d] = qkv[row + 2 * dim];
      }
    }
    barrier();
    if (!in_range) continue;
    uint tile_end = min(tile + KEYS, p.seq);
    if (p.causal != 0) tile_end = min(tile_end, i + 1);
    for (uint j = tile; j < tile_end; ++j) {
      const uint kk = j - tile;
      float score = 0.0;
      for (uint d = 0; d < p.head_dim; ++d) score += q[d] * k_tile[kk * p.head_dim + d];
      const float new_max = max(running_max, score);
      const float correction = exp(running_max - new_max);
      const float weight = exp(score - new_max);
      running_sum = running_sum * correction + weight;
      for (uint d = 0; d < p.head_dim; ++d) {
        acc[d] = acc[d] * correction + weight * v_tile[kk * p.head_dim + d];
      }
      running_max = new_max;
    }
  }
  if (!in_range) return;
  const uint out_base = (b * p.seq + i) * dim + h * p.head_dim;
  const float inverse = 1.0 / running_sum;
  for (uint d = 0; d < p.head_dim; ++d) result[out_base + d] = acc[d] * inverse;
}
