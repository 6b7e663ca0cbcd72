// nn.Embedding in fp32. Token ids must already be checked to lie in [0, vocab).
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

// out[count, dim] = weight[tokens[t]]
void EmbeddingForward(const float* weight, const int32_t* tokens, int64_t count, int64_t dim,
                      float* out);

// dweight[tokens[t]] += dout[t] (a token seen twice accumulates twice).
void EmbeddingBackward(const float* dout, const int32_t* tokens, int64_t count, int64_t dim,
                       float* dweight);

// The index of the first token outside [0, vocab), or -1 when all are valid.
int64_t FindInvalidToken(const int32_t* tokens, int64_t count, int64_t vocab);

}  // namespace fsdpd::cpu
