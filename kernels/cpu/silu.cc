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

void SwigluForward(const float* gate_up, int64_t rows, int64_t ffn, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * ffn;
    const float* up = gate + ffn;
    float* row = out + r * ffn;
    for (int64_t i = 0; i < ffn; ++i) row[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

void SwigluBackward(const float* dout, const float* gate_up, int64_t rows, int64_t ffn,
                    float* dgate_up, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * ffn;
    const float* up = gate + ffn;
    const float* gradient = dout + r * ffn;
    float* dgate = dgate_up + r * 2 * ffn;
    float* dup = dgate + ffn;
    for (int64_t i = 0; i < ffn; ++i) {
      // Both read before either is written: dgate_up may be gate_up.
      const float g = gate[i];
      const float u = up[i];
      const float denominator = 1.0f + std::exp(-g);
      const float sigmoid = 1.0f / denominator;
      const float silu = g / denominator;  // as SwigluForward computes it
      if (out != nullptr) out[r * ffn + i] = silu * u;
      dgate[i] = gradient[i] * u * sigmoid * (1.0f + g * (1.0f - sigmoid));
      dup[i] = gradient[i] * silu;
    }
  }
}

}  // namespace fsdpd::cpu
