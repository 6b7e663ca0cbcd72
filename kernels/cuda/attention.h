// Flash-style attention on the packed qkv layout (worker/backend/ops.h): multi-head, and its
// grouped-query form where kv_heads < heads key/value heads are each shared by heads / kv_heads
// query heads. bf16 in and out with fp32 softmax statistics. Forward streams key/value tiles
// through shared memory with an online softmax and saves only the output and each row's
// log-sum-exp; backward recomputes the probabilities from them (one kernel for dq, one for dk
// and dv, which owns a kv head and sums over its query heads in a fixed order: no atomics,
// deterministic). No [seq, seq] matrix is ever stored. head_dim 32, 64 and 128 run on tensor
// cores (WMMA, probabilities rounded to bf16 between the two products as in FlashAttention);
// other head dims run fp32 CUDA-core kernels. Where cuDNN is built in, its fused attention
// (attention_cudnn.h) runs instead by default: on Hopper it is several times faster.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/attention_limits.h"

namespace fsdpd::cuda {

// Which implementation runs. kAuto takes cuDNN's fused attention when this build has it and it
// accepts the shape, else the own tensor-core kernels (head_dim 32, 64, 128 with 16-byte aligned
// tensors), else the own fp32 CUDA-core kernels. The environment variable
// FSDPD_ATTENTION_KERNEL=cudnn|tensor-core|cuda-core overrides kAuto, for comparisons.
enum class AttentionKernel { kAuto, kCudnn, kTensorCore, kCudaCore };

struct AttentionDims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;  // query heads
  // heads · head_dim (q's width and out's); head_dim at most kMaxAttentionHeadDim, batch · heads
  // at most kMaxCudaAttentionBatchHeads (base/attention_limits.h)
  int64_t dim = 0;
  AttentionKernel kernel = AttentionKernel::kAuto;
  // Key and value heads, dividing heads; 0 means heads (multi-head attention). Query head h
  // reads kv head h / (heads / kv_heads).
  int64_t kv_heads = 0;

  int64_t KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
};

// The shapes these kernels run are in base/attention_limits.h: head_dim above
// kMaxOwnCudaAttentionHeadDim needs cuDNN's fused attention, and planning such a shape without it
// fails with an error that names both limits.

// Device scratch (bytes) each direction needs for the implementation that runs these dims.
struct AttentionWorkspace {
  int64_t forward_bytes = 0;
  int64_t backward_bytes = 0;
};

// The implementation that runs these dims (never kAuto), and its scratch. Errors: bad dims, or
// kCudnn asked for where cuDNN cannot run them (the message says why).
absl::StatusOr<AttentionKernel> ResolveAttentionKernel(const AttentionDims& dims, bool causal);
absl::StatusOr<AttentionWorkspace> AttentionWorkspaceBytes(const AttentionDims& dims, bool causal);

// qkv[batch, seq, dim + 2·kv_heads·head_dim] = q (dim) | k | v (kv_heads·head_dim each), each
// split into heads. out[batch, seq, dim] = softmax(q·kᵀ/√head_dim [+ causal mask]) · v per query
// head, with its group's k and v; lse[batch, heads, seq] fp32.
// `workspace` holds at least AttentionWorkspaceBytes(...).forward_bytes (null when 0).
absl::Status AttentionForward(const __nv_bfloat16* qkv, const AttentionDims& dims, bool causal,
                              __nv_bfloat16* out, float* lse, void* workspace,
                              int64_t workspace_bytes, cudaStream_t stream);

// dqkv, shaped as qkv, overwritten (every element written; a kv head's dk and dv sum over the
// query heads of its group); `workspace` holds at least
// AttentionWorkspaceBytes(...).backward_bytes.
absl::Status AttentionBackward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const __nv_bfloat16* out, const float* lse,
                               const AttentionDims& dims, bool causal, __nv_bfloat16* dqkv,
                               void* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace fsdpd::cuda
