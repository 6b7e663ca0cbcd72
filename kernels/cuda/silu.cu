#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/silu.h"
#include "worker/backend/cuda_check.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void SiluForwardKernel(const __nv_bfloat16* x, int64_t count, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = __bfloat162float(x[i]);
    out[i] = __float2bfloat16_rn(value / (1.0f + __expf(-value)));
  }
}

__global__ void SiluBackwardKernel(const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t count,
                                   __nv_bfloat16* dx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = __bfloat162float(x[i]);
    const float sigmoid = 1.0f / (1.0f + __expf(-value));
    dx[i] = __float2bfloat16_rn(__bfloat162float(dout[i]) * sigmoid *
                                (1.0f + value * (1.0f - sigmoid)));
  }
}

}  // namespace

absl::Status SiluForward(const __nv_bfloat16* x, int64_t count, __nv_bfloat16* out,
                         cudaStream_t stream) {
  if (count < 0 || (count > 0 && (x == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError("SiluForward: null pointer or negative count");
  }
  if (count == 0) return absl::OkStatus();
  SiluForwardKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(x, count, out);
  CUDA_CHECK_LAUNCH("SiluForwardKernel");
  return absl::OkStatus();
}

absl::Status SiluBackward(const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t count,
                          __nv_bfloat16* dx, cudaStream_t stream) {
  if (count < 0 || (count > 0 && (dout == nullptr || x == nullptr || dx == nullptr))) {
    return absl::InvalidArgumentError("SiluBackward: null pointer or negative count");
  }
  if (count == 0) return absl::OkStatus();
  SiluBackwardKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(dout, x, count, dx);
  CUDA_CHECK_LAUNCH("SiluBackwardKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
