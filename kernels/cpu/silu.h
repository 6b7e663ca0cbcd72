// SiLU in fp32: silu(x) = x · σ(x), and SwiGLU: silu(gate) · up.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

void SiluForward(const float* x, int64_t count, float* out);

// dx = dout · σ(x) · (1 + x · (1 − σ(x))), overwritten.
void SiluBackward(const float* dout, const float* x, int64_t count, float* dx);

// out[rows, ffn] = silu(gate) · up, gate and up the two halves of each gate_up[rows, 2·ffn] row.
void SwigluForward(const float* gate_up, int64_t rows, int64_t ffn, float* out);

// dgate_up[rows, 2·ffn] overwritten (it may be gate_up itself): dgate = dout · up · silu'(gate),
// dup = dout · silu(gate); out[rows, ffn] = silu(gate) · up too where out is not null.
void SwigluBackward(const float* dout, const float* gate_up, int64_t rows, int64_t ffn,
                    float* dgate_up, float* out);

}  // namespace fsdpd::cpu
