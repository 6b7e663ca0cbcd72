// SiLU on bf16 activations with fp32 math: out = x · sigmoid(x).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

// Where out_amax (dx_amax) is not null, it is raised to max |out| (max |dx|), the amax of the
// stored bf16 values, for the FP8 linear layer that reads the output next
// (kernels/cuda/amax.cuh; each must start non-negative).
absl::Status SiluForward(const __nv_bfloat16* x, int64_t count, __nv_bfloat16* out, float* out_amax,
                         cudaStream_t stream);
// dx = dout · sigmoid(x) · (1 + x · (1 − sigmoid(x))), overwritten (dx may be dout); with out
// not null, also out = silu(x) with the bits SiluForward gives, from the same read of x.
absl::Status SiluBackward(const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t count,
                          __nv_bfloat16* dx, __nv_bfloat16* out, float* dx_amax, float* out_amax,
                          cudaStream_t stream);

}  // namespace fsdpd::cuda
