#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/rmsnorm.h"
#include "worker/backend/cuda_check.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the backward pass; each keeps one row of weight-gradient partial sums.
constexpr int64_t kBackwardBlocks = 264;

__global__ void RmsNormForwardKernel(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                     int64_t dim, float eps, __nv_bfloat16* out, float* rstd) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* input = x + row * dim;
  float sum = 0.0f;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const float value = __bfloat162float(input[d]);
    sum = fmaf(value, value, sum);
  }
  sum = BlockSum(sum, scratch);
  const float inverse_rms = rsqrtf(sum / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[row] = inverse_rms;
  __nv_bfloat16* output = out + row * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    output[d] =
        __float2bfloat16_rn(__bfloat162float(input[d]) * inverse_rms * __bfloat162float(weight[d]));
  }
}

__global__ void RmsNormBackwardKernel(const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                      const __nv_bfloat16* weight, const float* rstd, int64_t rows,
                                      int64_t dim, __nv_bfloat16* dx, float* partials) {
  __shared__ float scratch[32];
  float* partial = partials + blockIdx.x * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) partial[d] = 0.0f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const __nv_bfloat16* input = x + row * dim;
    const __nv_bfloat16* gradient = dout + row * dim;
    const float inverse_rms = rstd[row];
    float projection = 0.0f;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      const float g = __bfloat162float(gradient[d]);
      const float value = __bfloat162float(input[d]);
      projection = fmaf(g * __bfloat162float(weight[d]), value, projection);
      partial[d] = fmaf(g * value, inverse_rms, partial[d]);
    }
    projection = BlockSum(projection, scratch);
    const float correction =
        projection * inverse_rms * inverse_rms * inverse_rms / static_cast<float>(dim);
    __nv_bfloat16* input_gradient = dx + row * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      const float g = __bfloat162float(gradient[d]);
      input_gradient[d] = __float2bfloat16_rn(inverse_rms * g * __bfloat162float(weight[d]) -
                                              __bfloat162float(input[d]) * correction);
    }
  }
}

__global__ void SumPartialRowsKernel(const float* partials, int64_t blocks, int64_t dim,
                                     float* dweight) {
  const int64_t d = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (d >= dim) return;
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) sum += partials[b * dim + d];
  dweight[d] += sum;
}

absl::Status CheckShape(const char* op, int64_t rows, int64_t dim) {
  if (rows < 0 || dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": rows must be >= 0 and dim > 0, got ", rows, " and ", dim));
  }
  if (rows > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": too many rows: ", rows));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNormForward(const __nv_bfloat16* x, const __nv_bfloat16* weight, int64_t rows,
                            int64_t dim, float eps, __nv_bfloat16* out, float* rstd,
                            cudaStream_t stream) {
  FSDPD_KERNEL_RETURN_IF_ERROR(CheckShape("RmsNormForward", rows, dim));
  if (rows == 0) return absl::OkStatus();
  if (x == nullptr || weight == nullptr || out == nullptr || rstd == nullptr) {
    return absl::InvalidArgumentError("RmsNormForward: null pointer argument");
  }
  if (!(eps >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNormForward: eps must be >= 0, got ", eps));
  }
  RmsNormForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, dim, eps,
                                                                             out, rstd);
  CUDA_CHECK_LAUNCH("RmsNormForwardKernel");
  return absl::OkStatus();
}

int64_t RmsNormBackwardScratchFloats(int64_t rows, int64_t dim) {
  return std::max<int64_t>(1, std::min(rows, kBackwardBlocks)) * dim;
}

absl::Status RmsNormBackward(const __nv_bfloat16* dout, const __nv_bfloat16* x,
                             const __nv_bfloat16* weight, const float* rstd, int64_t rows,
                             int64_t dim, __nv_bfloat16* dx, float* dweight, float* scratch,
                             cudaStream_t stream) {
  FSDPD_KERNEL_RETURN_IF_ERROR(CheckShape("RmsNormBackward", rows, dim));
  if (rows == 0) return absl::OkStatus();
  if (dout == nullptr || x == nullptr || weight == nullptr || rstd == nullptr || dx == nullptr ||
      dweight == nullptr || scratch == nullptr) {
    return absl::InvalidArgumentError("RmsNormBackward: null pointer argument");
  }
  const int64_t blocks = std::min(rows, kBackwardBlocks);
  RmsNormBackwardKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      dout, x, weight, rstd, rows, dim, dx, scratch);
  CUDA_CHECK_LAUNCH("RmsNormBackwardKernel");
  SumPartialRowsKernel<<<static_cast<unsigned>((dim + kThreads - 1) / kThreads), kThreads, 0,
                         stream>>>(scratch, blocks, dim, dweight);
  CUDA_CHECK_LAUNCH("SumPartialRowsKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
