// The LM head fused with mean cross-entropy. Tokens are processed in chunks: per chunk the
// bf16 logits come from one GEMM, one kernel turns them into the loss terms and, in place, into
// the logits' gradient, and two more GEMMs give dx and accumulate dhead. No fp32 [tokens, vocab]
// tensor ever exists; the largest temporary is one chunk's bf16 logits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/gemm.h"

namespace fsdpd::cuda {

// Rows per chunk for this vocabulary: about 64 Mi logits (128 MiB of bf16) per chunk.
int64_t CrossEntropyChunkRows(int64_t tokens, int64_t vocab);
// Device scratch (bytes) HeadCrossEntropy needs.
int64_t HeadCrossEntropyScratchBytes(int64_t tokens, int64_t vocab);

// x[tokens, dim] bf16, head[vocab, dim] bf16, targets[tokens] int32 in [0, vocab).
// loss[0] (fp32) = mean_t(logsumexp(logits_t) − logits_t[target_t]) with logits = x · headᵀ
// rounded to bf16 (as a bf16 linear layer gives them) and the softmax in fp32.
// dx[tokens, dim] (bf16, overwritten) and dhead[vocab, dim] (fp32, accumulated) are the
// gradients of that mean times loss_scale; either may be nullptr to skip it.
absl::Status HeadCrossEntropy(Gemm& gemm, const __nv_bfloat16* x, const __nv_bfloat16* head,
                              const int32_t* targets, int64_t tokens, int64_t dim, int64_t vocab,
                              float loss_scale, float* loss, __nv_bfloat16* dx, float* dhead,
                              void* scratch, int64_t scratch_bytes, cudaStream_t stream);

}  // namespace fsdpd::cuda
