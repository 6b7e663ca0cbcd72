#include "kernels/cpu/linear.h"

#include <vector>

#include "kernels/cpu/gemm.h"

namespace fsdpd::cpu {

void LinearForward(const float* x, const float* weight, const float* bias, int64_t rows,
                   int64_t in_features, int64_t out_features, float* out) {
  if (bias != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = out + r * out_features;
      for (int64_t j = 0; j < out_features; ++j) row[j] = bias[j];
    }
  }
  Gemm(false, true, rows, out_features, in_features, 1.0f, x, in_features, weight, in_features,
       bias != nullptr ? 1.0f : 0.0f, out, out_features);
}

void LinearBackward(const float* dout, const float* x, const float* weight, int64_t rows,
                    int64_t in_features, int64_t out_features, float* dx, float* dweight,
                    float* dbias, bool accumulate) {
  if (dx != nullptr) {
    Gemm(false, false, rows, in_features, out_features, 1.0f, dout, out_features, weight,
         in_features, 0.0f, dx, in_features);
  }
  if (dweight != nullptr) {
    Gemm(true, false, out_features, in_features, rows, 1.0f, dout, out_features, x, in_features,
         accumulate ? 1.0f : 0.0f, dweight, in_features);
  }
  if (dbias != nullptr) {
    // Summed in double so that the bias gradient over many rows does not drift.
    std::vector<double> sums(out_features, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dout + r * out_features;
      for (int64_t j = 0; j < out_features; ++j) sums[j] += row[j];
    }
    for (int64_t j = 0; j < out_features; ++j) {
      dbias[j] = accumulate ? dbias[j] + static_cast<float>(sums[j]) : static_cast<float>(sums[j]);
    }
  }
}

}  // namespace fsdpd::cpu
