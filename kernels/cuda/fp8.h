// FP8 (e4m3, e5m2) casts for the FP8 linear layers (kernels/cuda/fp8_gemm.h): bf16 tensors
// quantized with one fp32 scale per tensor, q = fp8(x · scale), and dequantized by the GEMM with
// the inverse (its descale).
//
// Scaling is current, not delayed: the scale of a tensor comes from the amax of that same
// tensor in this step, scale = fp8_max / amax, so nothing carries over between steps and a
// sudden rise in a tensor's range cannot overflow. The order is: zero the amax, compute
// amax(x), Fp8ScaleFromAmax turns it into scale and descale on the device, and CastToFp8 reads
// x once more and writes q (and qᵀ). The amax comes either from the kernel that produced x, in
// the pass that wrote it (an atomicMax a block into one device float: kernels/cuda/amax.cuh, used
// by RMSNorm's and SiLU's kernels), or from CastToFp8 in a pass of its own where the producer
// does not compute it (kernels/cuda/fp8_linear.h). It is also what a delayed scheme would
// record for the next step.
//
// Layouts: row-major, as the model sees them. cuBLASLt's FP8 products on Hopper read both
// operands K-contiguous (kernels/cuda/fp8_gemm.h), so the products of backward need the
// transposes of W, X and dY; CastToFp8 writes the transpose in the same pass, through shared
// memory, with 16-byte stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/fp8_format.h"

namespace fsdpd::cuda {

using ::fsdpd::Fp8Format;
using ::fsdpd::Fp8Max;

const char* Fp8FormatName(Fp8Format format);

// out[r, c] = fp8(in[r, c] · scale[0]) for a bf16 in[rows, cols]: the product rounded once in
// fp32, then to the nearest fp8 value (ties to even), saturating at ±Fp8Max (an infinity too);
// NaN stays NaN. Where out_transposed != nullptr, out_transposed[c, r] gets the same bytes.
// Where amax != nullptr, amax[0] = max(amax[0], max |in|) by atomicMax on the float's bits,
// which orders non-negative floats as integers: a NaN in `in` (its |·| bits exceed +inf's)
// leaves a NaN there, an infinity +inf. amax[0] must start non-negative (zeroed per step).
//
// out may be nullptr (only the transpose written); with out and out_transposed both nullptr
// the pass computes amax alone. `scale` is read on the device, so a scale computed by
// Fp8ScaleFromAmax earlier on the stream needs no synchronisation; it may be nullptr when
// nothing is written. Requirements, checked: cols a multiple of 16 (16-byte stores of each
// row), rows a multiple of 16 where the transpose is written (16-byte stores of each column),
// `in` and the outputs 16-byte aligned.
absl::Status CastToFp8(const __nv_bfloat16* in, int64_t rows, int64_t cols, Fp8Format format,
                       const float* scale, uint8_t* out, uint8_t* out_transposed, float* amax,
                       cudaStream_t stream);

// One thread on the device: scale[0] = Fp8Max(format) / amax[0] and scale_inverse[0] =
// 1 / scale[0], both fp32 (the descale cuBLASLt multiplies the product by is the inverse of
// the scale actually used, not amax / Fp8Max). amax 0 (an all-zero tensor): scale 1. A scale
// that overflows (amax below Fp8Max / FLT_MAX, a denormal range no bf16 activation reaches in
// practice) is clamped to FLT_MAX. amax +inf or NaN: scale and inverse NaN, so the cast writes
// NaN and the product is NaN, and the step's non-finite check sees the overflow instead of a
// value silently saturated to Fp8Max.
absl::Status Fp8ScaleFromAmax(const float* amax, Fp8Format format, float* scale,
                              float* scale_inverse, cudaStream_t stream);

}  // namespace fsdpd::cuda
