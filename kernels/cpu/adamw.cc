#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>

#include "kernels/split_master.h"

namespace fsdpd::cpu {

void AdamWStep(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t count,
               const AdamWHyperparameters& hyperparameters) {
  const double step = static_cast<double>(hyperparameters.step);
  // Scalars are formed in double and applied in fp32, as PyTorch does for fp32 tensors.
  const float decay = static_cast<float>(1.0 - hyperparameters.lr * hyperparameters.weight_decay);
  const float average_weight = static_cast<float>(1.0 - hyperparameters.beta1);
  const float beta2 = static_cast<float>(hyperparameters.beta2);
  const float square_weight = static_cast<float>(1.0 - hyperparameters.beta2);
  const double bias_correction1 = 1.0 - std::pow(hyperparameters.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(hyperparameters.beta2, step);
  const float step_size = static_cast<float>(hyperparameters.lr / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(hyperparameters.eps);
  for (int64_t i = 0; i < count; ++i) {
    const float g = grad[i];
    float p = param[i] * decay;
    // torch uses lerp for the first moment: m + w·(g − m).
    const float m = exp_avg[i] + average_weight * (g - exp_avg[i]);
    const float v = exp_avg_sq[i] * beta2 + square_weight * g * g;
    const float denominator = std::sqrt(v) / bias_correction2_sqrt + eps;
    p -= step_size * m / denominator;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p;
  }
}

void AdamWStepSplit(uint16_t* high, uint16_t* low, const float* grad, float* exp_avg,
                    float* exp_avg_sq, int64_t count, const AdamWHyperparameters& hyperparameters) {
  constexpr int64_t kChunk = 4096;
  float joined[kChunk];
  for (int64_t first = 0; first < count; first += kChunk) {
    const int64_t n = std::min(kChunk, count - first);
    for (int64_t i = 0; i < n; ++i) joined[i] = JoinFloat(high[first + i], low[first + i]);
    AdamWStep(joined, grad + first, exp_avg + first, exp_avg_sq + first, n, hyperparameters);
    for (int64_t i = 0; i < n; ++i) {
      const SplitHalves halves = SplitFloat(joined[i]);
      high[first + i] = halves.high;
      low[first + i] = halves.low;
    }
  }
}

}  // namespace fsdpd::cpu
