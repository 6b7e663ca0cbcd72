// Multi-head scaled dot-product attention in fp32 on nn.MultiheadAttention's packed layout.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t dim = 0;  // heads · head_dim
};

// qkv[batch, seq, 3·dim] holds q | k | v, each split into heads along dim. out[batch, seq, dim]
// = softmax(q·kᵀ/√head_dim, masked above the diagonal when causal) · v per head, heads
// concatenated; lse[batch, heads, seq] is each softmax row's log-sum-exp, kept for backward.
void AttentionForward(const float* qkv, const AttentionShape& shape, bool causal, float* out,
                      float* lse);

// Causal attention for the positions [first, first + rows) of one sequence, whose qkv rows
// for positions [0, first + rows) are in qkv[first + rows, 3·dim]: out[rows, dim], each
// position attending to every position up to its own. Decoding with a cache of qkv rows: the
// rows before `first` are the cache. With first 0 it is AttentionForward's causal output for
// one sequence.
void CausalAttentionRows(const float* qkv, int64_t heads, int64_t dim, int64_t first, int64_t rows,
                         float* out);

// dqkv[batch, seq, 3·dim] overwritten, from dout and what forward saved.
void AttentionBackward(const float* dout, const float* qkv, const float* out, const float* lse,
                       const AttentionShape& shape, bool causal, float* dqkv);

}  // namespace fsdpd::cpu
