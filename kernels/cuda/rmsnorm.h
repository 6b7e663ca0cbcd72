// RMSNorm (nn.RMSNorm with an elementwise affine weight) on bf16 activations with fp32
// statistics: out = x · rstd · weight, rstd = (mean(x²) + eps)^-½ kept in fp32 for backward.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

// x, out [rows, dim] bf16; weight [dim] bf16; rstd [rows] fp32. Where out_amax != nullptr,
// out_amax[0] = max(out_amax[0], max |out|), the amax of the stored bf16 values, for the FP8
// linear layer that reads out (kernels/cuda/amax.cuh; out_amax must start non-negative).
absl::Status RmsNormForward(const __nv_bfloat16* x, const __nv_bfloat16* weight, int64_t rows,
                            int64_t dim, float eps, __nv_bfloat16* out, float* rstd,
                            float* out_amax, cudaStream_t stream);

// Device scratch (floats) that RmsNormBackward needs for rows × dim.
int64_t RmsNormBackwardScratchFloats(int64_t rows, int64_t dim);

// dx [rows, dim] bf16 overwritten, or with accumulate_dx added to (the sum computed in fp32
// and rounded once); dweight [dim] fp32 accumulated, or overwritten with accumulate_dweight
// false. The weight gradient is summed per block of rows into `scratch`, then over blocks in a
// fixed order: deterministic. Where dx_amax != nullptr it is raised to max |dx| over the values
// stored (the sum, with accumulate_dx), as RmsNormForward's out_amax.
absl::Status RmsNormBackward(const __nv_bfloat16* dout, const __nv_bfloat16* x,
                             const __nv_bfloat16* weight, const float* rstd, int64_t rows,
                             int64_t dim, bool accumulate_dx, __nv_bfloat16* dx, float* dweight,
                             bool accumulate_dweight, float* scratch, float* dx_amax,
                             cudaStream_t stream);

}  // namespace fsdpd::cuda
