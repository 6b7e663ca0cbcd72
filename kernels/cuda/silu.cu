#include "base/cuda_check.h"
#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/silu.h"
#include "kernels/cuda/silu_math.cuh"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;

// Each kernel raises out_amax (and dx_amax) to the max |value| it stores where the pointer is
// not null (kernels/cuda/amax.cuh).
__global__ void SiluForwardKernel(const __nv_bfloat16* x, int64_t count, __nv_bfloat16* out,
                                  float* out_amax) {
  unsigned amax_bits = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = __bfloat162float(x[i]);
    out[i] = __float2bfloat16_rn(value / (1.0f + __expf(-value)));
    RaiseAmax(amax_bits, out[i]);
  }
  BlockAmaxToGlobal(AmaxFloatBits(amax_bits), out_amax);
}

// out (when not null) = silu(x) as SiluForwardKernel writes it, from the same read of x.
__global__ void SiluBackwardKernel(const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t count,
                                   __nv_bfloat16* dx, __nv_bfloat16* out, float* dx_amax,
                                   float* out_amax) {
  unsigned dx_bits = 0, out_bits = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = __bfloat162float(x[i]);
    const float sigmoid = 1.0f / (1.0f + __expf(-value));
    const __nv_bfloat16 gradient = __float2bfloat16_rn(__bfloat162float(dout[i]) * sigmoid *
                                                       (1.0f + value * (1.0f - sigmoid)));
    dx[i] = gradient;
    RaiseAmax(dx_bits, gradient);
    if (out != nullptr) {
      out[i] = __float2bfloat16_rn(value / (1.0f + __expf(-value)));
      RaiseAmax(out_bits, out[i]);
    }
  }
  BlockAmaxToGlobal(AmaxFloatBits(dx_bits), dx_amax);
  BlockAmaxToGlobal(AmaxFloatBits(out_bits), out_amax);
}

// The same maths eight elements at a time with 16-byte accesses (count a multiple of 8, all
// pointers 16-byte aligned): the kernels are bandwidth-bound.
__global__ void SiluForwardVectorKernel(const Bf16x8* x, int64_t vectors, Bf16x8* out,
                                        float* out_amax) {
  unsigned amax_bits = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    Bf16x8 in = x[i];
    Bf16x8 result;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 value = __bfloat1622float2(in.pairs[k]);
      result.pairs[k] = __floats2bfloat162_rn(Silu(value.x), Silu(value.y));
      RaiseAmax(amax_bits, result.pairs[k]);
    }
    out[i] = result;
  }
  BlockAmaxToGlobal(AmaxFloatBits(amax_bits), out_amax);
}

// kWithForward: also out = silu(x) as SiluForwardVectorKernel writes it, from the same read of
// x. dx may be dout itself (each element is read before it is written).
template <bool kWithForward>
__global__ void SiluBackwardVectorKernel(const Bf16x8* dout, const Bf16x8* x, int64_t vectors,
                                         Bf16x8* dx, Bf16x8* out, float* dx_amax, float* out_amax) {
  unsigned dx_bits = 0, out_bits = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    Bf16x8 gradient = dout[i];
    Bf16x8 in = x[i];
    Bf16x8 result;
    Bf16x8 forward;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 g = __bfloat1622float2(gradient.pairs[k]);
      const float2 value = __bfloat1622float2(in.pairs[k]);
      result.pairs[k] =
          __floats2bfloat162_rn(SiluGradient(g.x, value.x), SiluGradient(g.y, value.y));
      RaiseAmax(dx_bits, result.pairs[k]);
      if (kWithForward) {
        forward.pairs[k] = __floats2bfloat162_rn(Silu(value.x), Silu(value.y));
        RaiseAmax(out_bits, forward.pairs[k]);
      }
    }
    dx[i] = result;
    if (kWithForward) out[i] = forward;
  }
  BlockAmaxToGlobal(AmaxFloatBits(dx_bits), dx_amax);
  BlockAmaxToGlobal(AmaxFloatBits(out_bits), out_amax);
}

}  // namespace

absl::Status SiluForward(const __nv_bfloat16* x, int64_t count, __nv_bfloat16* out, float* out_amax,
                         cudaStream_t stream) {
  if (count < 0 || (count > 0 && (x == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError("SiluForward: null pointer or negative count");
  }
  if (count == 0) return absl::OkStatus();
  if (count % 8 == 0 && Aligned16(x) && Aligned16(out)) {
    SiluForwardVectorKernel<<<GridFor(count / 8, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<const Bf16x8*>(x), count / 8, reinterpret_cast<Bf16x8*>(out), out_amax);
    CUDA_CHECK_LAUNCH("SiluForwardVectorKernel");
    return absl::OkStatus();
  }
  SiluForwardKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(x, count, out, out_amax);
  CUDA_CHECK_LAUNCH("SiluForwardKernel");
  return absl::OkStatus();
}

absl::Status SiluBackward(const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t count,
                          __nv_bfloat16* dx, __nv_bfloat16* out, float* dx_amax, float* out_amax,
                          cudaStream_t stream) {
  if (count < 0 || (count > 0 && (dout == nullptr || x == nullptr || dx == nullptr))) {
    return absl::InvalidArgumentError("SiluBackward: null pointer or negative count");
  }
  if (out_amax != nullptr && out == nullptr) {
    return absl::InvalidArgumentError("SiluBackward: out_amax without out");
  }
  if (count == 0) return absl::OkStatus();
  if (count % 8 == 0 && Aligned16(dout) && Aligned16(x) && Aligned16(dx) &&
      (out == nullptr || Aligned16(out))) {
    const unsigned grid = GridFor(count / 8, kThreads);
    const auto* dout8 = reinterpret_cast<const Bf16x8*>(dout);
    const auto* x8 = reinterpret_cast<const Bf16x8*>(x);
    auto* dx8 = reinterpret_cast<Bf16x8*>(dx);
    if (out != nullptr) {
      SiluBackwardVectorKernel<true><<<grid, kThreads, 0, stream>>>(
          dout8, x8, count / 8, dx8, reinterpret_cast<Bf16x8*>(out), dx_amax, out_amax);
    } else {
      SiluBackwardVectorKernel<false>
          <<<grid, kThreads, 0, stream>>>(dout8, x8, count / 8, dx8, nullptr, dx_amax, nullptr);
    }
    CUDA_CHECK_LAUNCH("SiluBackwardVectorKernel");
    return absl::OkStatus();
  }
  SiluBackwardKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(dout, x, count, dx, out,
                                                                        dx_amax, out_amax);
  CUDA_CHECK_LAUNCH("SiluBackwardKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
