// Elementwise fp32 helpers and the fp32 ↔ bf16 conversions.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

// out = a + b; out may alias a or b.
void Add(const float* a, const float* b, int64_t count, float* out);
void Fill(float* x, int64_t count, float value);
void Scale(float* x, int64_t count, float factor);
// Σ x², summed in double.
double SumOfSquares(const float* x, int64_t count);

// bf16 as its raw 16 bits. fp32 → bf16 rounds to nearest, ties to even; NaN stays a quiet NaN.
uint16_t Float32ToBfloat16(float value);
float Bfloat16ToFloat32(uint16_t value);
void CastFloat32ToBfloat16(const float* src, int64_t count, uint16_t* dst);
void CastBfloat16ToFloat32(const uint16_t* src, int64_t count, float* dst);
// x = fp32(bf16(x)) in place: what a bf16 parameter holds, kept in fp32 storage.
void RoundToBfloat16(float* x, int64_t count);

}  // namespace fsdpd::cpu
