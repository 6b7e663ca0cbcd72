#version 450
// attention.comp on the matrix units (GL_NV_cooperative_matrix), for head_dim a multiple of 16
// up to 128: out[b, i, h] = Σ_j softmax_j(q_i·k_j/√head_dim) v_j, over j ≤ i when causal, with
// an online softmax (no [seq, seq] matrix). A workgroup owns 64 queries of one (batch, head),
// 16 per subgroup; each 32-key tile of K and V is staged once into shared memory as fp16 and
// shared by the four subgroups. Per tile a subgroup forms its 16×32 scores S = Q·Kᵀ from
// 16×16×16 fp16 fragments with fp32 sums, two lanes per query row turn them into weights
// P = exp(S − m) (fp16), and P·V accumulates in fp32 fragments that live across tiles.
// Fragments cannot be scaled row by row, so m is raised lazily: a row keeps its m until a score
// exceeds it by more than MARGIN (P ≤ e^MARGIN, far inside fp16's range), and only then are the
// subgroup's output fragments rescaled, through shared memory; with scores that settle early
// that happens in the first tiles only. q (scaled by 1/√head_dim), k, v and P are rounded to
// fp16; every product sum and the softmax are fp32. The host uses this shader only with
// 16×16×16 fp16→fp32 fragments and a subgroup of 32 (those of matmul_coop.comp);
// attention.comp serves the rest.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define SUBGROUPS 4
#define QUERIES (16 * SUBGROUPS)
#define KEYS 32
#define MAX_D 128
#define CHUNKS (MAX_D / 16)   // 16-wide slices of head_dim
#define LDV ((MAX_D + 8) / 8)  // 16-byte vectors a staged row (272 bytes: rows start apart)
#define PLDV (KEYS / 8 + 1)    // vectors a row of P (80 bytes)
#define LOWEST -3.402823466e38
#define MARGIN 8.0  // e^8 ≈ 2981: the largest weight before the outputs are rescaled
layout(local_size_x = 32 * SUBGROUPS) in;
layout(std430, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, binding = 0) readonly buffer Qkv4 { vec4 qkv4[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; } p;
// K rows then V rows of the current tile; at the start, the workgroup's 64 q rows.
shared uvec4 kv[2 * KEYS * LDV];
shared float scores[SUBGROUPS * 16 * KEYS];  // each subgroup's S, row-major 16 × KEYS
shared uvec4 weights[SUBGROUPS * 16 * PLDV];  // each subgroup's P in fp16
shared float partial[SUBGROUPS * 256];        // one 16×16 output fragment per subgroup

// `rows` rows of head_dim values of qkv (part 0 q, 1 k, 2 v) from sequence position `first`
// into kv at vector `at`, as fp16 scaled by `factor`; zeros past head_dim and past the sequence.
void Stage(uint part, uint first, uint rows, uint at, float factor, uint b, uint h) {
  const uint dim = p.heads * p.head_dim;
  for (uint e = gl_LocalInvocationID.x; e < rows * (MAX_D / 8); e += 32 * SUBGROUPS) {
    const uint r = e / (MAX_D / 8);
    const uint d = (e - r * (MAX_D / 8)) * 8;
    const uint j = first + r;
    uvec4 packed = uvec4(0);
    if (j < p.seq && d < p.head_dim) {
      const uint base = ((b * p.seq + j) * 3 * dim + part * dim + h * p.head_dim + d) / 4;
      const vec4 lo = qkv4[base] * factor;
      const vec4 hi = qkv4[base + 1] * factor;
      packed = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy),
                     packHalf2x16(hi.zw));
    }
    kv[at + r * LDV + d / 8] = packed;
  }
}

void main() {
  const uint bh = gl_WorkGroupID.y;
  const uint b = bh / p.heads;
  const uint h = bh - b * p.heads;
  const uint group = gl_SubgroupID;
  const uint lane = gl_SubgroupInvocationID;
  const uint row = lane / 2;   // this lane's query row within the subgroup's 16
  const uint half_ = lane % 2;  // which half of the row's keys and outputs it holds
  const uint first_query = gl_WorkGroupID.x * QUERIES;
  const uint i = first_query + group * 16 + row;
  const uint chunks = p.head_dim / 16;

  // q fragments for the whole loop (the 64 q rows staged through kv once).
  Stage(0, first_query, QUERIES, 0, p.scale, b, h);
  barrier();
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> q[CHUNKS];
  [[unroll]] for (uint c = 0; c < CHUNKS; ++c) {
    if (c < chunks) coopMatLoadNV(q[c], kv, group * 16 * LDV + c * 2, LDV, false);
  }

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> out_frag[CHUNKS];
  [[unroll]] for (uint c = 0; c < CHUNKS; ++c) {
    out_frag[c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  }
  float running_max = LOWEST;
  float running_sum = 0.0;
  const uint last_query = min(first_query + QUERIES, p.seq) - 1;
  const uint key_end = p.causal != 0 ? last_query + 1 : p.seq;
  const uint s_base = group * 16 * KEYS;
  const uint frag_at = group * 256;
  const uint row_at = frag_at + row * 16 + half_ * 8;  // this lane's 8 values of a fragment
  for (uint tile = 0; tile < key_end; tile += KEYS) {
    barrier();  // q fragments loaded, or the previous tile consumed
    Stage(1, tile, KEYS, 0, 1.0, b, h);
    Stage(2, tile, KEYS, KEYS * LDV, 1.0, b, h);
    barrier();

    // S = Q·Kᵀ: K's rows read column-major are Kᵀ.
    [[unroll]] for (uint f = 0; f < KEYS / 16; ++f) {
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
      [[unroll]] for (uint c = 0; c < CHUNKS; ++c) {
        if (c < chunks) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> k;
          coopMatLoadNV(k, kv, f * 16 * LDV + c * 2, LDV, true);
          s = coopMatMulAddNV(q[c], k, s);
        }
      }
      coopMatStoreNV(s, scores, s_base + f * 16, KEYS, false);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();

    // The softmax over this lane's 16 keys of its row; the pair of lanes agrees on the max and
    // the sum through one shuffle each.
    float s_row[16];
    float tile_max = LOWEST;
    [[unroll]] for (uint e = 0; e < 16; ++e) {
      const uint j = tile + half_ * 16 + e;
      const bool valid = j < p.seq && (p.causal == 0 || j <= i);
      s_row[e] = valid ? scores[s_base + row * KEYS + half_ * 16 + e] : LOWEST;
      tile_max = max(tile_max, s_row[e]);
    }
    tile_max = max(tile_max, subgroupShuffleXor(tile_max, 1));
    // (running_max + MARGIN is still LOWEST before the first valid key: any score raises it.)
    const bool raise = tile_max > running_max + MARGIN;
    const float new_max = raise ? tile_max : running_max;
    const float correction = exp(running_max - new_max);  // 1 unless raised
    float tile_sum = 0.0;
    uint packed[8];
    [[unroll]] for (uint e = 0; e < 16; e += 2) {
      const float w0 = s_row[e] > LOWEST ? exp(s_row[e] - new_max) : 0.0;
      const float w1 = s_row[e + 1] > LOWEST ? exp(s_row[e + 1] - new_max) : 0.0;
      tile_sum += w0 + w1;
      packed[e / 2] = packHalf2x16(vec2(w0, w1));
    }
    tile_sum += subgroupShuffleXor(tile_sum, 1);
    running_sum = running_sum * correction + tile_sum;
    running_max = new_max;
    const uint p_at = group * 16 * PLDV + row * PLDV + half_ * 2;
    weights[p_at] = uvec4(packed[0], packed[1], packed[2], packed[3]);
    weights[p_at + 1] = uvec4(packed[4], packed[5], packed[6], packed[7]);
    // A raised row rescales what it has summed so far (nothing before its first valid key).
    if (subgroupAny(raise && tile > 0)) {
      [[unroll]] for (uint c = 0; c < CHUNKS; ++c) {
        if (c < chunks) {
          coopMatStoreNV(out_frag[c], partial, frag_at, 16, false);
          subgroupMemoryBarrierShared();
          subgroupBarrier();
          [[unroll]] for (uint e = 0; e < 8; ++e) partial[row_at + e] *= correction;
          subgroupMemoryBarrierShared();
          subgroupBarrier();
          coopMatLoadNV(out_frag[c], partial, frag_at, 16, false);
          subgroupBarrier();  // loaded before the next fragment overwrites it
        }
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();

    // out += P·V.
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pw[KEYS / 16];
    [[unroll]] for (uint f = 0; f < KEYS / 16; ++f) {
      coopMatLoadNV(pw[f], weights, group * 16 * PLDV + f * 2, PLDV, false);
    }
    [[unroll]] for (uint c = 0; c < CHUNKS; ++c) {
      if (c < chunks) {
        [[unroll]] for (uint f = 0; f < KEYS / 16; ++f) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> v;
          coopMatLoadNV(v, kv, (KEYS + f * 16) * LDV + c * 2, LDV, false);
          out_frag[c] = coopMatMulAddNV(pw[f], v, out_frag[c]);
        }
      }
    }
  }
  // Each fragment through shared memory, divided by its row's sum.
  const uint dim = p.heads * p.head_dim;
  const uint out_base = (b * p.seq + i) * dim + h * p.head_dim;
  const float inverse = running_sum > 0.0 ? 1.0 / running_sum : 0.0;
  [[unroll]] for (uint c = 0; c < CHUNKS; ++c) {
    if (c < chunks) {
      coopMatStoreNV(out_frag[c], partial, frag_at, 16, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      if (i < p.seq) {
        [[unroll]] for (uint e = 0; e < 8; ++e) {
          result[out_base + c * 16 + half_ * 8 + e] = partial[row_at + e] * inverse;
        }
      }
      subgroupBarrier();  // read before the next fragment overwrites it
    }
  }
}
