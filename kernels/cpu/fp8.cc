#include "kernels/cpu/fp8.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/linear.h"

namespace fsdpd::cpu {
namespace {

int MantissaBits(Fp8Format format) { return format == Fp8Format::kE4M3 ? 3 : 2; }
// The exponent of the smallest normal value: 2^-6 (e4m3), 2^-14 (e5m2).
int MinExponent(Fp8Format format) { return format == Fp8Format::kE4M3 ? -6 : -14; }

// in quantized and dequantized with the scale of known_amax[0], or of its own amax where
// known_amax is nullptr.
std::vector<float> Quantized(const float* in, int64_t count, Fp8Format format,
                             const float* known_amax) {
  std::vector<float> out(static_cast<size_t>(count));
  QuantizeDequantizeWithAmax(in, count, known_amax != nullptr ? *known_amax : MaxAbs(in, count),
                             format, out.data());
  return out;
}

}  // namespace

float RoundToFp8(float x, Fp8Format format) {
  if (std::isnan(x)) return x;
  const float largest = Fp8Max(format);
  if (std::fabs(x) >= largest) return std::copysign(largest, x);
  if (x == 0.0f) return x;
  // The spacing of the format's values at |x|: 2^(e − mantissa bits) for |x| in [2^e, 2^(e+1)),
  // and that of the smallest normals below them (the subnormals). x / quantum is exact (a power
  // of two), so nearbyint's ties-to-even is the format's.
  const int exponent = std::max(std::ilogb(x), MinExponent(format));
  const float quantum = std::ldexp(1.0f, exponent - MantissaBits(format));
  const float rounded = std::nearbyint(x / quantum) * quantum;
  // A value just below Fp8Max can round up past it (e4m3's 448 < x < 464 to 480): saturate.
  return std::fabs(rounded) > largest ? std::copysign(largest, x) : rounded;
}

float Fp8ScaleFromAmax(float amax, Fp8Format format) {
  if (!(amax >= 0.0f) || std::isinf(amax)) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.0f) return 1.0f;
  const float scale = Fp8Max(format) / amax;
  return std::isinf(scale) ? FLT_MAX : scale;
}

float MaxAbs(const float* in, int64_t count) {
  float amax = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    const float magnitude = std::fabs(in[i]);
    // A NaN wins, as the device's atomicMax on the float's bits lets it.
    if (std::isnan(magnitude) || magnitude > amax) amax = magnitude;
    if (std::isnan(amax)) break;
  }
  return amax;
}

void QuantizeDequantizeWithAmax(const float* in, int64_t count, float amax, Fp8Format format,
                                float* out) {
  const float scale = Fp8ScaleFromAmax(amax, format);
  const float descale = 1.0f / scale;
  for (int64_t i = 0; i < count; ++i) out[i] = RoundToFp8(in[i] * scale, format) * descale;
}

void QuantizeDequantize(const float* in, int64_t count, Fp8Format format, float* out) {
  QuantizeDequantizeWithAmax(in, count, MaxAbs(in, count), format, out);
}

void Fp8LinearForward(const float* x, const float* weight, const float* bias, int64_t rows,
                      int64_t in_features, int64_t out_features, float* out, const float* x_amax) {
  const std::vector<float> x8 = Quantized(x, rows * in_features, Fp8Format::kE4M3, x_amax);
  const std::vector<float> w8 =
      Quantized(weight, out_features * in_features, Fp8Format::kE4M3, nullptr);
  LinearForward(x8.data(), w8.data(), bias, rows, in_features, out_features, out);
}

void Fp8LinearBackward(const float* dout, const float* x, const float* weight, int64_t rows,
                       int64_t in_features, int64_t out_features, float* dx, float* dweight,
                       float* dbias, bool accumulate, const float* dout_amax, const float* x_amax) {
  const std::vector<float> d8 = Quantized(dout, rows * out_features, Fp8Format::kE5M2, dout_amax);
  if (dx != nullptr) {
    const std::vector<float> w8 =
        Quantized(weight, out_features * in_features, Fp8Format::kE4M3, nullptr);
    LinearBackward(d8.data(), nullptr, w8.data(), rows, in_features, out_features, dx, nullptr,
                   nullptr, accumulate);
  }
  if (dweight != nullptr) {
    const std::vector<float> x8 = Quantized(x, rows * in_features, Fp8Format::kE4M3, x_amax);
    LinearBackward(d8.data(), x8.data(), nullptr, rows, in_features, out_features, nullptr, dweight,
                   nullptr, accumulate);
  }
  if (dbias != nullptr) {
    LinearBackward(dout, nullptr, nullptr, rows, in_features, out_features, nullptr, nullptr, dbias,
                   accumulate);
  }
}

}  // namespace fsdpd::cpu
