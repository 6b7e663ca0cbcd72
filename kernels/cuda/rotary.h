// Rotary position embedding in place on bf16 qkv rows packed as attention takes them
// (worker/backend/ops.h, Rotary; kernels/cuda/attention.h): within each q and k head of the row
// at position s, values i and i + head_dim/2 are rotated by s·inv_freq_i, Hugging Face's
// rotate_half pairs; v is left alone. The angles are the CPU reference's (kernels/cpu/rotary.cc):
// inv_freq_i = 1 / theta^(2i/head_dim) computed on the host with the same fp32 expression and
// passed to the kernel, the angle their fp32 product with the position, its cosine and sine in
// fp32 (sincosf, full range reduction); the rotation's products and sums are rounded as the CPU
// rounds them (no fused multiply-add).
//
// Each block takes a row: it first writes the row's cosines and sines (head_dim/2 of each) into
// shared memory, then every q and k head of the row reads them. That costs head_dim/2 sincosf a
// row (64 for head_dim 128, against 20 heads of 128 values at the Llama bench's size), where a
// table over (seq, head_dim/2) in global memory would have each thread read as many bytes of
// fp32 cosines and sines (64 for 8 pairs) as the bf16 values it moves (32 read, 32 written).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "base/attention_limits.h"

namespace fsdpd::cuda {

struct RotaryDims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key (and value) heads
  int64_t head_dim = 0;  // even, at most kMaxRotaryHeadDim
};

// The widest head the kernel takes: its inverse frequencies travel as a kernel argument. It is
// attention's own limit (base/attention_limits.h), so no shape attention runs is refused.
inline constexpr int64_t kMaxRotaryHeadDim = kMaxAttentionHeadDim;

// qkv[batch, seq, (heads + 2·kv_heads)·head_dim] in place; inverse rotates the other way (sine
// negated): the backward, applied to dqkv.
absl::Status Rotary(__nv_bfloat16* qkv, const RotaryDims& dims, double theta, bool inverse,
                    cudaStream_t stream);

}  // namespace fsdpd::cuda
