// SiLU's device maths, shared by the SiLU (silu.cu) and SwiGLU (swiglu.cu) kernels so that both
// give the same bits for the same input (included by .cu files only).
#pragma once

#include <cuda_runtime.h>

namespace fsdpd::cuda {

// sigmoid(value) with the SFU's approximate exponential and reciprocal (about 2 ulp of fp32,
// far below the bf16 rounding of the result). An IEEE division is a long instruction sequence
// that made these kernels issue-bound rather than memory-bound. rcp.approx of +inf is +0, so
// very negative inputs still give sigmoid 0.
__device__ __forceinline__ float FastSigmoid(float value) {
  float reciprocal;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(reciprocal) : "f"(1.0f + __expf(-value)));
  return reciprocal;
}

__device__ __forceinline__ float Silu(float value) { return value * FastSigmoid(value); }

// gradient · silu'(value) = gradient · σ · (1 + value · (1 − σ)).
__device__ __forceinline__ float SiluGradient(float gradient, float value) {
  const float sigmoid = FastSigmoid(value);
  return gradient * sigmoid * (1.0f + value * (1.0f - sigmoid));
}

}  // namespace fsdpd::cuda
