// nn.Embedding on bf16 weights: a row gather forward, a deterministic scatter-add backward.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

// out[count, dim] = weight[tokens[t]]; token ids must lie in [0, vocab) (checked on the host
// by the caller, where they come from).
absl::Status EmbeddingForward(const __nv_bfloat16* weight, const int32_t* tokens, int64_t count,
                              int64_t dim, __nv_bfloat16* out, cudaStream_t stream);

// Device scratch (bytes) that EmbeddingBackward needs for `count` tokens.
int64_t EmbeddingBackwardScratchBytes(int64_t count);

// dweight[vocab, dim] (fp32) += dout[t] (bf16) at row tokens[t]. Deterministic: positions are
// stably sorted by token (a radix sort), then each distinct token's rows are summed in
// position order by one block and added once, so no two threads ever add to the same row.
absl::Status EmbeddingBackward(const __nv_bfloat16* dout, const int32_t* tokens, int64_t count,
                               int64_t dim, int64_t vocab, float* dweight, void* scratch,
                               int64_t scratch_bytes, cudaStream_t stream);

}  // namespace fsdpd::cuda
