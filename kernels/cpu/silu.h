// SiLU in fp32: silu(x) = x · σ(x).
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

void SiluForward(const float* x, int64_t count, float* out);

// dx = dout · σ(x) · (1 + x · (1 − σ(x))), overwritten.
void SiluBackward(const float* dout, const float* x, int64_t count, float* dx);

}  // namespace fsdpd::cpu
