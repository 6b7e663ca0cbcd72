// Internal to attention.cu: the tensor-core (WMMA, bf16 in, fp32 accumulate) flash attention
// kernels for head_dim 32, 64 and 128. attention.cu chooses between these and the fp32
// CUDA-core kernels, which serve every other head_dim and the unaligned case.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda::tensor_core {

// The packed layout of attention.h: qkv rows of `stride` = dim + 2·kv_dim values, q (dim = heads
// query heads) then k and v (kv_dim = kv_heads heads each); query head h reads kv head h / group.
struct FlashGeometry {
  int64_t batch;
  int64_t seq;
  int64_t heads;
  int64_t dim;
  float scale;
  int64_t kv_heads;
  int64_t group;
  int64_t kv_dim;
  int64_t stride;
};

// True when these kernels serve the head_dim.
inline bool Supports(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128;
}

absl::Status Forward(const __nv_bfloat16* qkv, const FlashGeometry& g, int head_dim, bool causal,
                     __nv_bfloat16* out, float* lse, cudaStream_t stream);

// `delta` holds Σ dout·out per (batch, head, row), computed by the caller.
absl::Status Backward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                      const float* delta, const FlashGeometry& g, int head_dim, bool causal,
                      __nv_bfloat16* dqkv, cudaStream_t stream);

}  // namespace fsdpd::cuda::tensor_core
