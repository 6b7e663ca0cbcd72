// Flash-style multi-head attention on nn.MultiheadAttention's packed layout, bf16 in and out
// with fp32 softmax statistics. Forward streams key/value tiles through shared memory with an
// online softmax and saves only the output and each row's log-sum-exp; backward recomputes the
// probabilities from them (one kernel for dq, one for dk and dv: no atomics, deterministic).
// No [seq, seq] matrix is ever stored. head_dim 32, 64 and 128 run on tensor cores (WMMA,
// probabilities rounded to bf16 between the two products as in FlashAttention); other head
// dims run fp32 CUDA-core kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

struct AttentionDims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t dim = 0;  // heads · head_dim; head_dim at most kMaxAttentionHeadDim
  // Tensor-core kernels (WMMA) serve head_dim 32, 64 and 128 with 16-byte aligned tensors;
  // everything else, or tensor_cores = false, runs the fp32 CUDA-core kernels.
  bool tensor_cores = true;
};

inline constexpr int64_t kMaxAttentionHeadDim = 128;

// qkv[batch, seq, 3·dim] = q | k | v, heads split along dim. out[batch, seq, dim] =
// softmax(q·kᵀ/√head_dim [+ causal mask]) · v per head; lse[batch, heads, seq] fp32.
absl::Status AttentionForward(const __nv_bfloat16* qkv, const AttentionDims& dims, bool causal,
                              __nv_bfloat16* out, float* lse, cudaStream_t stream);

// Device scratch (bytes) AttentionBackward needs: one fp32 per (batch, head, row).
int64_t AttentionBackwardScratchBytes(const AttentionDims& dims);

// dqkv[batch, seq, 3·dim] overwritten (every element written).
absl::Status AttentionBackward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const __nv_bfloat16* out, const float* lse,
                               const AttentionDims& dims, bool causal, __nv_bfloat16* dqkv,
                               void* scratch, int64_t scratch_bytes, cudaStream_t stream);

}  // namespace fsdpd::cuda
