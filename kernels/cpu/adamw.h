// torch.optim.AdamW's update (single-tensor, non-capturable path) over flat fp32 arrays.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

struct AdamWHyperparameters {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t step = 1;  // 1-based: the step being taken, for bias correction
};

// p ·= 1 − lr·wd; m = lerp(m, g, 1 − β1); v = β2·v + (1 − β2)·g²;
// p −= lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + eps).
void AdamWStep(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t count,
               const AdamWHyperparameters& hyperparameters);

// The same update of a master kept as two 16-bit halves (kernels/split_master.h): each value is
// joined, updated exactly as AdamWStep updates it, and split again.
void AdamWStepSplit(uint16_t* high, uint16_t* low, const float* grad, float* exp_avg,
                    float* exp_avg_sq, int64_t count, const AdamWHyperparameters& hyperparameters);

}  // namespace fsdpd::cpu
