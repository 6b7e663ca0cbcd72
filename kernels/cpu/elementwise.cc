#include "kernels/cpu/elementwise.h"

#include <cstring>

namespace fsdpd::cpu {

void Add(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void Fill(float* x, int64_t count, float value) {
  for (int64_t i = 0; i < count; ++i) x[i] = value;
}

void Scale(float* x, int64_t count, float factor) {
  for (int64_t i = 0; i < count; ++i) x[i] *= factor;
}

double SumOfSquares(const float* x, int64_t count) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

uint16_t Float32ToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep sign, force a quiet NaN
  }
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; infinities
  // and values that round past the largest finite bf16 become infinity, as in PyTorch.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bfloat16ToFloat32(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

void CastFloat32ToBfloat16(const float* src, int64_t count, uint16_t* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = Float32ToBfloat16(src[i]);
}

void CastBfloat16ToFloat32(const uint16_t* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = Bfloat16ToFloat32(src[i]);
}

void RoundToBfloat16(float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] = Bfloat16ToFloat32(Float32ToBfloat16(x[i]));
}

}  // namespace fsdpd::cpu
