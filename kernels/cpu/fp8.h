// FP8 linear layers on the CPU, for parallel.matmul_dtype fp8: the CUDA backend's products
// (kernels/cuda/fp8.h, kernels/cuda/fp8_gemm.h) emulated in fp32, so that the CPU backend is the
// oracle of the CUDA one with FP8 as without it.
//
// Each operand is quantized as the CUDA cast does it: one scale per tensor from the tensor's own
// amax (scale = Fp8Max / amax, the device's fp32 division), q = fp8(x · scale) rounded to nearest
// even and saturating, then dequantized with the same descale the GEMM multiplies by, x̂ = q ·
// (1 / scale). The products of x̂ and ŵ are then the fp32 products of kernels/cpu/linear.h. On
// the same inputs the CPU and the device get the same quantized values; what differs is the
// order of the fp32 sums and, on the device, the bf16 rounding of the inputs and outputs.
//
// Formats: x and weight e4m3; the output gradient e5m2 (the wider range the gradients need).
// The bias gradient is the column sum of the unquantized output gradient, as on the device.
#pragma once

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fsdpd::cpu {

// x rounded to the nearest value of the format (ties to even), saturating at ±Fp8Max (an
// infinity too); NaN stays NaN. As __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...).
float RoundToFp8(float x, Fp8Format format);

// The scale of a tensor of this amax, as Fp8ScaleFromAmax computes it on the device: 1 for an
// all-zero tensor, FLT_MAX where Fp8Max / amax overflows, NaN for an infinite or NaN amax.
float Fp8ScaleFromAmax(float amax, Fp8Format format);

// max |in[i]|, NaN if any in[i] is NaN (as the device's max on the float's bits): the amax.
float MaxAbs(const float* in, int64_t count);

// out[i] = RoundToFp8(in[i] · scale) · (1 / scale), the scale from max |in| (NaN if any in[i]
// is NaN). out may be in.
void QuantizeDequantize(const float* in, int64_t count, Fp8Format format, float* out);
// The same with the scale of a given amax (its producer's, Fp8OperandAmax in
// worker/backend/ops.h).
void QuantizeDequantizeWithAmax(const float* in, int64_t count, float amax, Fp8Format format,
                                float* out);

// As cpu::LinearForward, on x and weight quantized to e4m3. x_amax: the amax to scale x with,
// or nullptr for x's own.
void Fp8LinearForward(const float* x, const float* weight, const float* bias, int64_t rows,
                      int64_t in_features, int64_t out_features, float* out,
                      const float* x_amax = nullptr);

// As cpu::LinearBackward: dx from dout (e5m2) and weight (e4m3), dweight from dout (e5m2) and
// x (e4m3); dbias from dout unquantized. dout_amax, x_amax as x_amax above.
void Fp8LinearBackward(const float* dout, const float* x, const float* weight, int64_t rows,
                       int64_t in_features, int64_t out_features, float* dx, float* dweight,
                       float* dbias, bool accumulate, const float* dout_amax = nullptr,
                       const float* x_amax = nullptr);

}  // namespace fsdpd::cpu
