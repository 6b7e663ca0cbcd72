#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/device_common.cuh"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamWScalars {
  float decay;
  float average_weight;
  float beta2;
  float square_weight;
  float step_size;
  float bias_correction2_sqrt;
  float eps;
};

__global__ void AdamWKernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            int64_t count, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grad[i];
    float p = __fmul_rn(param[i], s.decay);
    const float m = __fadd_rn(exp_avg[i], __fmul_rn(s.average_weight, __fsub_rn(g, exp_avg[i])));
    const float v =
        __fadd_rn(__fmul_rn(exp_avg_sq[i], s.beta2), __fmul_rn(__fmul_rn(s.square_weight, g), g));
    const float denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
    p = __fsub_rn(p, __fdiv_rn(__fmul_rn(s.step_size, m), denominator));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p;
  }
}

}  // namespace

absl::Status AdamWStep(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                       int64_t count, const AdamWStepParams& params, cudaStream_t stream) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("AdamW: negative count ", count));
  if (count == 0) return absl::OkStatus();
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = 1.0 - std::pow(params.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(params.beta2, step);
  AdamWScalars scalars;
  scalars.decay = static_cast<float>(1.0 - params.lr * params.weight_decay);
  scalars.average_weight = static_cast<float>(1.0 - params.beta1);
  scalars.beta2 = static_cast<float>(params.beta2);
  scalars.square_weight = static_cast<float>(1.0 - params.beta2);
  scalars.step_size = static_cast<float>(params.lr / bias_correction1);
  scalars.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  scalars.eps = static_cast<float>(params.eps);
  // One element a thread in short blocks: on the comm stream (the optimizer in backward there),
  // a capped grid of long-running blocks would hold every SM from the compute stream's GEMMs.
  AdamWKernel<<<GridFor(count, kThreads, kMaxGridX), kThreads, 0, stream>>>(
      param, grad, exp_avg, exp_avg_sq, count, scalars);
  CUDA_CHECK_LAUNCH("AdamWKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
