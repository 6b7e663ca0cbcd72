// cuDNN's fused flash attention (the frontend's SDPA graphs) on fsdpd's packed layout: q, k and v
// are strided views into qkv[batch, seq, dim + 2·kv_heads·head_dim] (k and v with kv_heads heads
// under grouped-query attention, which the SDPA graphs take as such), and dq, dk, dv are written
// straight into dqkv.
// One graph per (shape, causal, direction) is built on first use, its plan chosen by cuDNN's
// heuristics, and cached for the life of the process. The softmax statistics cuDNN saves are
// the rows' natural-log log-sum-exp of the scaled scores, the same quantity the own kernels
// keep, so `lse` means one thing whichever implementation wrote it.
//
// Backward accumulates dq with atomics inside cuDNN: results can differ in the last bits from
// run to run. The own kernels (attention.h, AttentionKernel::kTensorCore) are deterministic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd::cuda {
struct AttentionDims;
}

namespace fsdpd::cuda::cudnn_attention {

// Whether this build has cuDNN at all (FSDPD_HAS_CUDNN); a true answer does not promise that a
// given shape runs: Prepare says that.
bool Compiled();

// Device scratch each direction needs for these dims.
struct Workspace {
  int64_t forward_bytes = 0;
  int64_t backward_bytes = 0;
};

// Builds (once) the forward and backward graphs for these dims, or says why cuDNN cannot run
// them (not compiled in, no cuDNN library, unsupported shape). Both directions are decided
// together, so a forward through cuDNN is always paired with a backward through cuDNN.
absl::StatusOr<Workspace> Prepare(const AttentionDims& dims, bool causal);

// Both need a successful Prepare for the same dims and causal, and `workspace` of at least the
// bytes it reported (may be null when that is 0).
absl::Status Forward(const __nv_bfloat16* qkv, const AttentionDims& dims, bool causal,
                     __nv_bfloat16* out, float* lse, void* workspace, cudaStream_t stream);
absl::Status Backward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                      const float* lse, const AttentionDims& dims, bool causal, __nv_bfloat16* dqkv,
                      void* workspace, cudaStream_t stream);

}  // namespace fsdpd::cuda::cudnn_attention
