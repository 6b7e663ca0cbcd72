#include "kernels/cpu/silu.h"

#include <cmath>

namespace fsdpd::cpu {

void SiluForward(const float* x, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SiluBackward(const float* dout, const float* x, int64_t count, float* dx) {
  for (int64_t i = 0; i < count; ++i) {
    const float sigmoid = 1.0f / (1.0f + std::exp(-x[i]));
    dx[i] = dout[i] * sigmoid * (1.0f + x[i] * (1.0f - sigmoid));
  }
}

}  // namespace fsdpd::cpu
