// Elementwise kernels and reductions over flat tensors: the residual add, fp32 ↔ bf16 casts,
// fill, scale, and the sum of squares behind the global gradient norm. Host launchers only:
// each checks its arguments, runs on the given stream and checks the launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

// out = a + b; out may alias a or b.
absl::Status AddBf16(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t count,
                     __nv_bfloat16* out, cudaStream_t stream);
absl::Status AddFloat(const float* a, const float* b, int64_t count, float* out,
                      cudaStream_t stream);

// Round to nearest even.
absl::Status CastFloatToBf16(const float* src, int64_t count, __nv_bfloat16* dst,
                             cudaStream_t stream);
absl::Status CastBf16ToFloat(const __nv_bfloat16* src, int64_t count, float* dst,
                             cudaStream_t stream);
// x = float(bf16(x)) in place.
absl::Status RoundFloatToBf16(float* x, int64_t count, cudaStream_t stream);

absl::Status FillFloat(float* x, int64_t count, float value, cudaStream_t stream);
absl::Status FillBf16(__nv_bfloat16* x, int64_t count, float value, cudaStream_t stream);
absl::Status ScaleFloat(float* x, int64_t count, float factor, cudaStream_t stream);
absl::Status ScaleBf16(__nv_bfloat16* x, int64_t count, float factor, cudaStream_t stream);

// result[0] = Σ x² in fp32, reduced in a fixed order (the same input gives the same bits); an
// fp32 x of at least 4 elements, 16-byte aligned, in the order device_common.cuh fixes, which
// AdamWStepWithSquareSum (kernels/cuda/adamw.h) also takes. `partials` is device scratch of
// SumOfSquaresScratchFloats(count) floats.
int64_t SumOfSquaresScratchFloats(int64_t count);
// grid_limit > 0: at most that many blocks in the first pass, striding over its slices (the
// same bits; AdamWStepParams::grid_limit says why).
absl::Status SumOfSquaresFloat(const float* x, int64_t count, float* partials, float* result,
                               cudaStream_t stream, int64_t grid_limit = 0);
absl::Status SumOfSquaresBf16(const __nv_bfloat16* x, int64_t count, float* partials, float* result,
                              cudaStream_t stream);
// The last pass of that order: result[0] = the partial_count partials summed, then the squares
// of tail[0..tail_count) (0 to 3 elements past the last vector).
absl::Status FinishSquareSum(const float* partials, int64_t partial_count, const float* tail,
                             int64_t tail_count, float* result, cudaStream_t stream);

}  // namespace fsdpd::cuda
