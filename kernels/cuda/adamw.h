// torch.optim.AdamW's update (single-tensor path) fused over a flat fp32 shard.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

struct AdamWStepParams {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t step = 1;  // 1-based
  // The most blocks the update's kernels (and its sum's first pass) launch, each block striding
  // over the work; 0: no limit, one short block per slice of the work. A limit of N keeps the
  // optimizer on about N SMs while another stream's GEMMs hold the rest (FSDPD_OPTIMIZER_SMS,
  // worker/backend/cuda_backend.h). The results are the same bits either way.
  int64_t grid_limit = 0;
};

// p ·= 1 − lr·wd; m = m + (1 − β1)·(g − m); v = β2·v + (1 − β2)·g²;
// p −= lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + eps). Scalars are formed in double on the host
// and the update runs in fp32 without fused multiply-adds, in the reference's order, so it
// matches the CPU backend bit for bit.
absl::Status AdamWStep(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                       int64_t count, const AdamWStepParams& params, cudaStream_t stream);

// The same update, and square_sum[0] = Σ grad² exactly as SumOfSquaresFloat(grad) computes it
// (kernels/cuda/elementwise.h), from the same read of the gradient where the shards are 16-byte
// aligned. `partials`: SumOfSquaresScratchFloats(count) floats of device scratch.
absl::Status AdamWStepWithSquareSum(float* param, const float* grad, float* exp_avg,
                                    float* exp_avg_sq, int64_t count, const AdamWStepParams& params,
                                    float* partials, float* square_sum, cudaStream_t stream);

// The same update of a master kept as two 16-bit halves (kernels/split_master.h): each value is
// joined, updated as AdamWStep updates it and split again, so high stays the bf16 parameters
// compute reads. With square_sum non-null it also leaves Σ grad² there, the bits of
// SumOfSquaresFloat (`partials` as there), in a pass of its own; with square_sum null, partials
// is unused.
absl::Status AdamWStepSplit(uint16_t* high, uint16_t* low, const float* grad, float* exp_avg,
                            float* exp_avg_sq, int64_t count, const AdamWStepParams& params,
                            float* partials, float* square_sum, cudaStream_t stream);

}  // namespace fsdpd::cuda
