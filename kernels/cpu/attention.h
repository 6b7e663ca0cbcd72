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

// dqkv[batch, seq, 3·dim] overwritten, from dout and what forward saved.
void AttentionBackward(const float* dout, const float* qkv, const float* out, const float* lse,
                       const AttentionShape& shape, bool causal, float* dqkv);

}  // namespace fsdpd::cpu
