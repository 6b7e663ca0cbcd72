#version 450
// Multi-head attention on nn.MultiheadAttention's packed qkv[batch, seq, 3·dim]:
// out[b, i, h] = Σ_j softmax_j(q_i·k_j/√head_dim) v_j, over j ≤ i when causal. Online softmax
// (a running max and sum), so no [seq, seq] matrix exists. PARTS consecutive invocations share
// one query row, each holding every PARTS-th vec4 of q and of the output (32 floats each at
// head_dim 128, so nothing spills out of registers); a score is their partial dot products
// summed by subgroup shuffles. The workgroup's 64 queries share each 32-key tile of K and V in
// shared memory, read as vec4s (one shared load per 4 multiply-adds), and the softmax is
// rescaled once per tile, not per key. head_dim ≤ 128 (the host refuses larger); the subgroup
// size must be a multiple of PARTS (the host checks).
// With first > 0 the seq query rows are the positions first, first + 1, … of a sequence whose
// qkv holds first + seq rows (decoding with a cache of qkv rows); out holds the seq rows.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#define QUERIES 64
#define PARTS 4
#define KEYS 32
#define MAX_HEAD_DIM 128
#define ROW4 (MAX_HEAD_DIM / 4)      // vec4s per K/V row in shared memory
#define SLICE4 (ROW4 / PARTS)        // vec4s of q and of the output per invocation
layout(local_size_x = QUERIES * PARTS) in;
layout(std430, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; uint first; } p;
shared vec4 k_tile[KEYS * ROW4];
shared vec4 v_tile[KEYS * ROW4];
void main() {
  const uint dim = p.heads * p.head_dim;
  const uint hd = p.head_dim;
  const uint bh = gl_WorkGroupID.y;
  const uint b = bh / p.heads;
  const uint h = bh - b * p.heads;
  const uint lane = gl_LocalInvocationID.x;
  const uint part = lane % PARTS;
  const uint first_query = gl_WorkGroupID.x * QUERIES;
  const uint i = first_query + lane / PARTS;
  const bool in_range = i < p.seq;
  const uint keys = p.first + p.seq;  // qkv rows a sequence
  // This invocation's vec4s of the row are t·PARTS + part, t < SLICE4: dimensions
  // 4·(t·PARTS + part) + c, so a query's PARTS invocations read consecutive vec4s of a key.
  vec4 q[SLICE4];
  vec4 acc[SLICE4];
  const uint q_base = (b * keys + p.first + min(i, p.seq - 1)) * 3 * dim + h * hd;
  [[unroll]] for (uint t = 0; t < SLICE4; ++t) {
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      const uint d = (t * PARTS + part) * 4 + c;
      q[t][c] = d < hd ? qkv[q_base + d] * p.scale : 0.0;
    }
    acc[t] = vec4(0.0);
  }
  float running_max = -3.402823466e38;
  float running_sum = 0.0;
  const uint last_query = min(first_query + QUERIES, p.seq) - 1;
  const uint key_end = p.causal != 0 ? p.first + last_query + 1 : keys;
  for (uint tile = 0; tile < key_end; tile += KEYS) {
    barrier();
    // Rows of MAX_HEAD_DIM, zero past head_dim and past the sequence: the products below then
    // need no bounds checks (q is zero there too).
    for (uint e = lane; e < KEYS * MAX_HEAD_DIM; e += QUERIES * PARTS) {
      const uint kk = e / MAX_HEAD_DIM;
      const uint d = e - kk * MAX_HEAD_DIM;
      const uint j = tile + kk;
      const bool valid = j < keys && d < hd;
      const uint row = (b * keys + min(j, keys - 1)) * 3 * dim + h * hd + min(d, hd - 1);
      k_tile[e / 4][e % 4] = valid ? qkv[row + dim] : 0.0;
      v_tile[e / 4][e % 4] = valid ? qkv[row + 2 * dim] : 0.0;
    }
    barrier();
    if (!in_range) continue;
    uint tile_end = min(tile + KEYS, keys);
    if (p.causal != 0) tile_end = min(tile_end, p.first + i + 1);
    if (tile_end <= tile) continue;  // the same for a query's PARTS invocations
    const uint count = tile_end - tile;
    // Scores of the tile's keys; all PARTS invocations of a query take the same branches, so
    // the shuffles (within aligned groups of PARTS lanes) always find their partners. The key
    // loops stay rolled (s[] may live in local memory: 2 accesses per 64 FMAs) to keep the
    // pipeline small; the per-dimension loops unroll so q and acc stay in registers.
    float s[KEYS];
    float tile_max = -3.402823466e38;
    [[dont_unroll]] for (uint kk = 0; kk < count; ++kk) {
      float partial = 0.0;
      [[unroll]] for (uint t = 0; t < SLICE4; ++t) {
        partial += dot(q[t], k_tile[kk * ROW4 + t * PARTS + part]);
      }
      partial += subgroupShuffleXor(partial, 1);
      partial += subgroupShuffleXor(partial, 2);
      s[kk] = partial;
      tile_max = max(tile_max, partial);
    }
    const float new_max = max(running_max, tile_max);
    const float correction = exp(running_max - new_max);
    running_sum *= correction;
    [[unroll]] for (uint t = 0; t < SLICE4; ++t) acc[t] *= correction;
    [[dont_unroll]] for (uint kk = 0; kk < count; ++kk) {
      const float weight = exp(s[kk] - new_max);
      running_sum += weight;
      [[unroll]] for (uint t = 0; t < SLICE4; ++t) {
        acc[t] = fma(vec4(weight), v_tile[kk * ROW4 + t * PARTS + part], acc[t]);
      }
    }
    running_max = new_max;
  }
  if (!in_range) return;
  const uint out_base = (b * p.seq + i) * dim + h * hd;
  const float inverse = 1.0 / running_sum;
  [[unroll]] for (uint t = 0; t < SLICE4; ++t) {
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      const uint d = (t * PARTS + part) * 4 + c;
      if (d < hd) result[out_base + d] = acc[t][c] * inverse;
    }
  }
}
