// The CPU emulation of the FP8 linear layers (kernels/cpu/fp8.h), the oracle of the CUDA ones:
// rounding to e4m3 and e5m2 against the formats' values decoded here independently, the scale's
// edge cases (which must be the device's), the quantization error bound, and the products.
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/linear.h"

namespace fsdpd::cpu {
namespace {

// Every finite non-negative value of the format, ascending, decoded from its bit fields.
std::vector<double> FiniteValues(Fp8Format format) {
  const int mantissa_bits = format == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = format == Fp8Format::kE4M3 ? 7 : 15;
  const int exponents = format == Fp8Format::kE4M3 ? 16 : 31;  // e5m2's 31 is inf/NaN
  std::vector<double> values;
  for (int e = 0; e < exponents; ++e) {
    for (int m = 0; m < (1 << mantissa_bits); ++m) {
      if (format == Fp8Format::kE4M3 && e == 15 && m == 7) continue;  // e4m3's NaN
      const double fraction = static_cast<double>(m) / (1 << mantissa_bits);
      values.push_back(e == 0 ? std::ldexp(fraction, 1 - bias)
                              : std::ldexp(1.0 + fraction, e - bias));
    }
  }
  return values;
}

class Fp8RoundingTest : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8RoundingTest, ValuesStayTiesGoToEvenAndTheRestSaturates) {
  const Fp8Format format = GetParam();
  const std::vector<double> values = FiniteValues(format);
  ASSERT_EQ(values.back(), Fp8Max(format));
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = static_cast<float>(values[i]);
    ASSERT_EQ(RoundToFp8(v, format), v) << v;
    ASSERT_EQ(RoundToFp8(-v, format), -v) << v;
    if (i + 1 == values.size()) break;
    // Between two neighbours: the midpoint goes to the even code (even index here), a hair
    // either side to the nearer one.
    const double low = values[i], high = values[i + 1];
    const float middle = static_cast<float>((low + high) / 2);
    ASSERT_EQ(RoundToFp8(middle, format), static_cast<float>(i % 2 == 0 ? low : high)) << middle;
    ASSERT_EQ(RoundToFp8(std::nextafter(middle, 0.0f), format), static_cast<float>(low));
    ASSERT_EQ(RoundToFp8(std::nextafter(middle, INFINITY), format), static_cast<float>(high));
  }
  const float largest = Fp8Max(format);
  EXPECT_EQ(RoundToFp8(largest * 1.05f, format), largest);
  EXPECT_EQ(RoundToFp8(1e30f, format), largest);
  EXPECT_EQ(RoundToFp8(INFINITY, format), largest);
  EXPECT_EQ(RoundToFp8(-INFINITY, format), -largest);
  EXPECT_TRUE(std::isnan(RoundToFp8(NAN, format)));
  EXPECT_EQ(RoundToFp8(1e-30f, format), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8RoundingTest,
                         ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                         [](const ::testing::TestParamInfo<Fp8Format>& info) {
                           return info.param == Fp8Format::kE4M3 ? "E4M3" : "E5M2";
                         });

TEST(Fp8ScaleTest, EdgeCasesAreTheDevicesOwn) {
  EXPECT_EQ(Fp8ScaleFromAmax(0.0f, Fp8Format::kE4M3), 1.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(448.0f, Fp8Format::kE4M3), 1.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(2.0f, Fp8Format::kE5M2), 28672.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(1e-44f, Fp8Format::kE4M3), FLT_MAX);
  EXPECT_TRUE(std::isnan(Fp8ScaleFromAmax(INFINITY, Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isnan(Fp8ScaleFromAmax(NAN, Fp8Format::kE5M2)));
}

TEST(Fp8QuantizeTest, ErrorWithinHalfAStepAndNanSpreads) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(4096);
  for (float& v : x) v = normal(random);
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    std::vector<float> q(x.size());
    QuantizeDequantize(x.data(), static_cast<int64_t>(x.size()), format, q.data());
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float scale = Fp8ScaleFromAmax(amax, format);
    // Half a step: 2^-(mantissa bits + 1) relative for normals, half the smallest subnormal
    // step (e4m3 2^-10, e5m2 2^-17) absolute below them, both in the scaled domain.
    const double relative = format == Fp8Format::kE4M3 ? 1.0 / 16 : 1.0 / 8;
    const double absolute =
        (format == Fp8Format::kE4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17)) / scale;
    int changed = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double error = std::fabs(static_cast<double>(q[i]) - x[i]);
      ASSERT_LE(error, std::max(relative * std::fabs(x[i]), absolute) * (1 + 1e-6)) << x[i];
      changed += q[i] != x[i];
    }
    EXPECT_GT(changed, static_cast<int>(x.size()) / 2);  // it did quantize
  }
  x[100] = NAN;
  std::vector<float> q(x.size());
  QuantizeDequantize(x.data(), static_cast<int64_t>(x.size()), Fp8Format::kE4M3, q.data());
  for (float v : q) ASSERT_TRUE(std::isnan(v));
}

// The products are fp32 products of the quantized operands: within a few quantization steps
// of the exact ones in norm, never equal to them, and the bias gradient is the exact column sum.
TEST(Fp8LinearTest, ProductsAreNearTheExactOnesAndTheBiasGradientIsExact) {
  const int64_t rows = 32, in = 48, out = 16;
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto draw = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& e : v) e = normal(random);
    return v;
  };
  const std::vector<float> x = draw(rows * in), w = draw(out * in), dout = draw(rows * out);
  const std::vector<float> bias = draw(out);
  auto distance = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      n += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(d / n);
  };
  std::vector<float> exact(rows * out), fp8(rows * out);
  LinearForward(x.data(), w.data(), bias.data(), rows, in, out, exact.data());
  Fp8LinearForward(x.data(), w.data(), bias.data(), rows, in, out, fp8.data());
  // Each operand's element is off by at most 2^-4 relative (e4m3), about 2^-4/√3 in RMS; two
  // operands, independent errors: ~0.05 in norm, well under 0.1, and far from 0.
  EXPECT_GT(distance(fp8, exact), 1e-3);
  EXPECT_LT(distance(fp8, exact), 0.1);

  std::vector<float> dx_exact(rows * in), dx(rows * in), dw_exact(out * in, 1.0f),
      dw(out * in, 1.0f), db_exact(out, 1.0f), db(out, 1.0f);
  LinearBackward(dout.data(), x.data(), w.data(), rows, in, out, dx_exact.data(), dw_exact.data(),
                 db_exact.data(), /*accumulate=*/true);
  Fp8LinearBackward(dout.data(), x.data(), w.data(), rows, in, out, dx.data(), dw.data(), db.data(),
                    /*accumulate=*/true);
  // e5m2 dout: 2^-3 relative at most, then as above: ~0.08 in norm, under 0.15.
  EXPECT_GT(distance(dx, dx_exact), 1e-3);
  EXPECT_LT(distance(dx, dx_exact), 0.15);
  EXPECT_LT(distance(dw, dw_exact), 0.15);
  EXPECT_EQ(db, db_exact);
}

}  // namespace
}  // namespace fsdpd::cpu
