#include "kernels/cpu/embedding.h"

#include <cstring>

namespace fsdpd::cpu {

void EmbeddingForward(const float* weight, const int32_t* tokens, int64_t count, int64_t dim,
                      float* out) {
  for (int64_t t = 0; t < count; ++t) {
    std::memcpy(out + t * dim, weight + static_cast<int64_t>(tokens[t]) * dim,
                static_cast<size_t>(dim) * sizeof(float));
  }
}

void EmbeddingBackward(const float* dout, const int32_t* tokens, int64_t count, int64_t dim,
                       float* dweight) {
  for (int64_t t = 0; t < count; ++t) {
    float* row = dweight + static_cast<int64_t>(tokens[t]) * dim;
    const float* gradient = dout + t * dim;
    for (int64_t d = 0; d < dim; ++d) row[d] += gradient[d];
  }
}

int64_t FindInvalidToken(const int32_t* tokens, int64_t count, int64_t vocab) {
  for (int64_t t = 0; t < count; ++t) {
    if (tokens[t] < 0 || tokens[t] >= vocab) return t;
  }
  return -1;
}

}  // namespace fsdpd::cpu
