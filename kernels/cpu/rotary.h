// Rotary position embedding in fp32 on packed qkv rows (worker/backend/ops.h, Rotary), Hugging
// Face's rotate_half convention.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

struct RotaryShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key (and value) heads
  int64_t head_dim = 0;  // even
};

// In place on qkv[batch, seq, (heads + 2·kv_heads)·head_dim]: within each q and k head of the
// row at position s, values i and i + head_dim/2 (i < head_dim/2) are rotated by the angle
// s·theta^(−2i/head_dim), computed in fp32; v is left alone. inverse rotates the other way (the
// backward, on the gradient).
void Rotary(float* qkv, const RotaryShape& shape, double theta, bool inverse);

}  // namespace fsdpd::cpu
