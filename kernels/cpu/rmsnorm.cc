#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

namespace fsdpd::cpu {

void RmsNormForward(const float* x, const float* weight, int64_t rows, int64_t dim, double eps,
                    float* out, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    double sum_of_squares = 0.0;
    for (int64_t d = 0; d < dim; ++d) sum_of_squares += static_cast<double>(row[d]) * row[d];
    const float inverse_rms = static_cast<float>(1.0 / std::sqrt(sum_of_squares / dim + eps));
    rstd[r] = inverse_rms;
    float* output = out + r * dim;
    for (int64_t d = 0; d < dim; ++d) output[d] = row[d] * inverse_rms * weight[d];
  }
}

void RmsNormBackward(const float* dout, const float* x, const float* weight, const float* rstd,
                     int64_t rows, int64_t dim, bool accumulate_dx, float* dx, float* dweight,
                     bool accumulate_dweight) {
  // dweight is summed over rows in double, then added once.
  std::vector<double> weight_gradient(dim, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    const float* gradient = dout + r * dim;
    const double inverse_rms = rstd[r];
    // y_d = x_d · r · w_d with r = (mean(x²) + eps)^-½, so
    // dx_d = r · g_d·w_d − x_d · r³ / dim · Σ_j g_j·w_j·x_j.
    double projection = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      projection += static_cast<double>(gradient[d]) * weight[d] * row[d];
      weight_gradient[d] += static_cast<double>(gradient[d]) * row[d] * inverse_rms;
    }
    const double correction = projection * inverse_rms * inverse_rms * inverse_rms / dim;
    float* input_gradient = dx + r * dim;
    for (int64_t d = 0; d < dim; ++d) {
      const float value =
          static_cast<float>(inverse_rms * gradient[d] * weight[d] - row[d] * correction);
      input_gradient[d] = accumulate_dx ? input_gradient[d] + value : value;
    }
  }
  for (int64_t d = 0; d < dim; ++d) {
    const float sum = static_cast<float>(weight_gradient[d]);
    dweight[d] = accumulate_dweight ? dweight[d] + sum : sum;
  }
}

}  // namespace fsdpd::cpu
