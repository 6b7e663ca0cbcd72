#include "kernels/cpu/rotary.h"

#include <cmath>
#include <vector>

namespace fsdpd::cpu {

void Rotary(float* qkv, const RotaryShape& shape, double theta, bool inverse) {
  const int64_t half = shape.head_dim / 2;
  const int64_t rotated_heads = shape.heads + shape.kv_heads;  // q's, then k's
  const int64_t stride = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  // As transformers' LlamaRotaryEmbedding: inv_freq_i = 1 / theta^(2i / head_dim) and the
  // angle position · inv_freq_i, both in fp32, then its cosine and sine in fp32.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(shape.head_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  std::vector<float> cosines(static_cast<size_t>(half)), sines(static_cast<size_t>(half));
  for (int64_t s = 0; s < shape.seq; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(s) * inv_freq[i];
      cosines[i] = std::cos(angle);
      sines[i] = inverse ? -std::sin(angle) : std::sin(angle);
    }
    for (int64_t b = 0; b < shape.batch; ++b) {
      float* row = qkv + (b * shape.seq + s) * stride;
      for (int64_t h = 0; h < rotated_heads; ++h) {
        float* x = row + h * shape.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float first = x[i];
          const float second = x[i + half];
          x[i] = first * cosines[i] - second * sines[i];
          x[i + half] = second * cosines[i] + first * sines[i];
        }
      }
    }
  }
}

}  // namespace fsdpd::cpu
