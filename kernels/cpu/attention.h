// Multi-head scaled dot-product attention in fp32 on nn.MultiheadAttention's packed layout,
// and its grouped-query form (fewer key and value heads, each shared by a group of query heads).
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t dim = 0;       // heads · head_dim
  int64_t kv_heads = 0;  // key and value heads, dividing heads; 0: heads
  int64_t KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
};

// qkv[batch, seq, (heads + 2·kv_heads)·head_dim] holds q (dim wide) | k | v (kv_heads·head_dim
// each), each split into heads; with kv_heads = heads that is 3·dim. out[batch, seq, dim]
// = softmax(q·kᵀ/√head_dim, masked above the diagonal when causal) · v per query head h, with
// the k and v of kv head h / (heads / kv_heads), heads concatenated; lse[batch, heads, seq] is
// each softmax row's log-sum-exp, kept for backward.
void AttentionForward(const float* qkv, const AttentionShape& shape, bool causal, float* out,
                      float* lse);

// Causal attention for the positions [first, first + rows) of one sequence, whose qkv rows
// for positions [0, first + rows) are in qkv[first + rows, 3·dim]: out[rows, dim], each
// position attending to every position up to its own. Decoding with a cache of qkv rows: the
// rows before `first` are the cache. With first 0 it is AttentionForward's causal output for
// one sequence.
void CausalAttentionRows(const float* qkv, int64_t heads, int64_t dim, int64_t first, int64_t rows,
                         float* out);

// dqkv, shaped as qkv, overwritten, from dout and what forward saved: a kv head's dk and dv sum
// over the query heads that read it.
void AttentionBackward(const float* dout, const float* qkv, const float* out, const float* lse,
                       const AttentionShape& shape, bool causal, float* dqkv);

}  // namespace fsdpd::cpu
