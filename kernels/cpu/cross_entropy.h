// The LM head fused with mean cross-entropy in fp32, processed in row chunks so that the full
// [tokens, vocab] logits are never held at once.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

// Rows per chunk: large enough for efficient matrix products, small enough that a chunk's
// logits (chunk · vocab floats) stay modest.
inline constexpr int64_t kCrossEntropyChunkRows = 128;

// x[tokens, dim], head[vocab, dim], targets[tokens] in [0, vocab).
// Returns mean_t(logsumexp(x_t·headᵀ) − (x_t·headᵀ)[target_t]). Writes dx[tokens, dim]
// (overwritten) and adds to dhead[vocab, dim] the gradients of that mean times loss_scale.
// Either gradient pointer may be nullptr to skip it.
double HeadCrossEntropy(const float* x, const float* head, const int32_t* targets, int64_t tokens,
                        int64_t dim, int64_t vocab, double loss_scale, float* dx, float* dhead);

// Forward only: logits[tokens, vocab] = x · headᵀ (for evaluation and tests).
void HeadLogits(const float* x, const float* head, int64_t tokens, int64_t dim, int64_t vocab,
                float* logits);

}  // namespace fsdpd::cpu
