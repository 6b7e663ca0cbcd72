#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace fsdpd::cpu {

double HeadCrossEntropy(const float* x, const float* head, const int32_t* targets, int64_t tokens,
                        int64_t dim, int64_t vocab, double loss_scale, float* dx, float* dhead) {
  if (tokens == 0) return 0.0;
  const bool want_gradients = dx != nullptr || dhead != nullptr;
  const float gradient_scale = static_cast<float>(loss_scale / static_cast<double>(tokens));
  std::vector<float> logits(static_cast<size_t>(std::min(tokens, kCrossEntropyChunkRows) * vocab));
  double loss_sum = 0.0;
  for (int64_t first = 0; first < tokens; first += kCrossEntropyChunkRows) {
    const int64_t rows = std::min(kCrossEntropyChunkRows, tokens - first);
    const float* chunk_x = x + first * dim;
    Gemm(false, true, rows, vocab, dim, 1.0f, chunk_x, dim, head, dim, 0.0f, logits.data(), vocab);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits.data() + r * vocab;
      const float maximum = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - maximum);
      const double log_sum_exp = maximum + std::log(sum);
      const int32_t target = targets[first + r];
      loss_sum += log_sum_exp - row[target];
      if (want_gradients) {
        const float row_log_sum_exp = static_cast<float>(log_sum_exp);
        // d(mean loss)/d logits = (softmax − one_hot(target)) / tokens, times loss_scale.
        for (int64_t v = 0; v < vocab; ++v) {
          row[v] = std::exp(row[v] - row_log_sum_exp) * gradient_scale;
        }
        row[target] -= gradient_scale;
      }
    }
    if (dx != nullptr) {
      Gemm(false, false, rows, dim, vocab, 1.0f, logits.data(), vocab, head, dim, 0.0f,
           dx + first * dim, dim);
    }
    if (dhead != nullptr) {
      Gemm(true, false, vocab, dim, rows, 1.0f, logits.data(), vocab, chunk_x, dim, 1.0f, dhead,
           dim);
    }
  }
  return loss_sum / static_cast<double>(tokens);
}

void HeadLogits(const float* x, const float* head, int64_t tokens, int64_t dim, int64_t vocab,
                float* logits) {
  Gemm(false, true, tokens, vocab, dim, 1.0f, x, dim, head, dim, 0.0f, logits, vocab);
}

}  // namespace fsdpd::cpu
