// AdamW, the bf16 conversions and the small elementwise kernels of kernels/cpu.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"

namespace fsdpd::cpu {
namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// One step worked by hand: p = 1, g = 0.5, m = v = 0, lr = 0.1, wd = 0.01, t = 1.
// decay: 1 · (1 − 0.001) = 0.999; m = 0.05, v = 0.00025; m̂ = 0.5, v̂ = 0.25;
// p = 0.999 − 0.1 · 0.5 / (0.5 + 1e-8) ≈ 0.899.
TEST(KernelsCpuAdamWTest, MatchesHandWorkedStep) {
  float param = 1.0f, grad = 0.5f, exp_avg = 0.0f, exp_avg_sq = 0.0f;
  AdamWHyperparameters hyperparameters;
  hyperparameters.lr = 0.1;
  hyperparameters.weight_decay = 0.01;
  hyperparameters.step = 1;
  AdamWStep(&param, &grad, &exp_avg, &exp_avg_sq, 1, hyperparameters);
  EXPECT_NEAR(exp_avg, 0.05f, 1e-8);
  EXPECT_NEAR(exp_avg_sq, 0.00025f, 1e-10);
  EXPECT_NEAR(param, 0.899f, 1e-6);
}

// Several steps against PyTorch's formula evaluated in double:
// p −= lr·wd·p; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²; m̂ = m/(1−β1^t); v̂ = v/(1−β2^t);
// p −= lr · m̂ / (√v̂ + eps). fp32 evaluation differs by a few ulps of each term, so the
// parameters must agree to 1e-6 relative (updates are ~lr = 1e-2, far above that).
TEST(KernelsCpuAdamWTest, MatchesPyTorchFormulaOverSteps) {
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t count = 257;
  std::vector<float> param(count), exp_avg(count, 0.0f), exp_avg_sq(count, 0.0f);
  for (float& value : param) value = normal(random);
  std::vector<double> reference_param(param.begin(), param.end());
  std::vector<double> reference_m(count, 0.0), reference_v(count, 0.0);
  AdamWHyperparameters hyperparameters;
  hyperparameters.lr = 1e-2;
  hyperparameters.beta1 = 0.8;
  hyperparameters.beta2 = 0.95;
  hyperparameters.eps = 1e-6;
  hyperparameters.weight_decay = 0.1;
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<float> grad(count);
    for (float& value : grad) value = normal(random);
    hyperparameters.step = step;
    AdamWStep(param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(), count, hyperparameters);
    const double lr = hyperparameters.lr, beta1 = hyperparameters.beta1,
                 beta2 = hyperparameters.beta2;
    for (int64_t i = 0; i < count; ++i) {
      double& p = reference_param[i];
      p -= lr * hyperparameters.weight_decay * p;
      reference_m[i] = beta1 * reference_m[i] + (1 - beta1) * grad[i];
      reference_v[i] = beta2 * reference_v[i] + (1 - beta2) * grad[i] * grad[i];
      const double m_hat = reference_m[i] / (1 - std::pow(beta1, step));
      const double v_hat = reference_v[i] / (1 - std::pow(beta2, step));
      p -= lr * m_hat / (std::sqrt(v_hat) + hyperparameters.eps);
    }
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_NEAR(param[i], reference_param[i], 1e-6 * (1 + std::fabs(reference_param[i])))
          << "step " << step << " element " << i;
      ASSERT_NEAR(exp_avg[i], reference_m[i], 1e-6);
      ASSERT_NEAR(exp_avg_sq[i], reference_v[i], 1e-6);
    }
  }
}

TEST(KernelsCpuAdamWTest, ZeroGradientOnlyDecays) {
  float param = 2.0f, grad = 0.0f, exp_avg = 0.0f, exp_avg_sq = 0.0f;
  AdamWHyperparameters hyperparameters;
  hyperparameters.lr = 0.5;
  hyperparameters.weight_decay = 0.1;
  AdamWStep(&param, &grad, &exp_avg, &exp_avg_sq, 1, hyperparameters);
  EXPECT_FLOAT_EQ(param, 2.0f * (1.0f - 0.05f));
}

TEST(KernelsCpuBfloat16Test, RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(Float32ToBfloat16(FromBits(0x3f808000u)), 0x3f80u);
  // 1 + 3·2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): the tie goes up.
  EXPECT_EQ(Float32ToBfloat16(FromBits(0x3f818000u)), 0x3f82u);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(Float32ToBfloat16(FromBits(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(Float32ToBfloat16(FromBits(0x3f807fffu)), 0x3f80u);
  // Negative values round symmetrically.
  EXPECT_EQ(Float32ToBfloat16(FromBits(0xbf808001u)), 0xbf81u);
}

TEST(KernelsCpuBfloat16Test, SpecialValues) {
  EXPECT_EQ(Float32ToBfloat16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(Float32ToBfloat16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_EQ(Float32ToBfloat16(0.0f), 0x0000u);
  EXPECT_EQ(Float32ToBfloat16(-0.0f), 0x8000u);
  // The largest float rounds past bf16's largest finite value to infinity.
  EXPECT_EQ(Float32ToBfloat16(std::numeric_limits<float>::max()), 0x7f80u);
  const uint16_t nan = Float32ToBfloat16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat32(nan)));
  // A NaN whose payload sits only in the low bits must stay NaN, not become infinity.
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat32(Float32ToBfloat16(FromBits(0x7f800001u)))));
}

TEST(KernelsCpuBfloat16Test, RoundTripAndInPlaceRounding) {
  std::mt19937 random(12);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> values(1000);
  for (float& value : values) value = normal(random);
  std::vector<uint16_t> packed(values.size());
  CastFloat32ToBfloat16(values.data(), static_cast<int64_t>(values.size()), packed.data());
  std::vector<float> unpacked(values.size());
  CastBfloat16ToFloat32(packed.data(), static_cast<int64_t>(packed.size()), unpacked.data());
  std::vector<float> rounded = values;
  RoundToBfloat16(rounded.data(), static_cast<int64_t>(rounded.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    // bf16 keeps 8 significant bits: rounding to nearest errs by at most 2^-8 relative.
    EXPECT_LE(std::fabs(unpacked[i] - values[i]), std::ldexp(std::fabs(values[i]), -8));
    EXPECT_EQ(rounded[i], unpacked[i]);
    uint32_t bits;
    std::memcpy(&bits, &rounded[i], sizeof(bits));
    EXPECT_EQ(bits & 0xffffu, 0u);
  }
}

TEST(KernelsCpuElementwiseTest, AddFillScaleSumOfSquares) {
  std::vector<float> a = {1.0f, -2.0f, 3.5f};
  const std::vector<float> b = {0.5f, 2.0f, -1.0f};
  Add(a.data(), b.data(), 3, a.data());  // in place
  EXPECT_EQ(a, (std::vector<float>{1.5f, 0.0f, 2.5f}));
  Scale(a.data(), 3, -2.0f);
  EXPECT_EQ(a, (std::vector<float>{-3.0f, -0.0f, -5.0f}));
  EXPECT_DOUBLE_EQ(SumOfSquares(a.data(), 3), 34.0);
  Fill(a.data(), 3, 0.25f);
  EXPECT_EQ(a, (std::vector<float>{0.25f, 0.25f, 0.25f}));
}

}  // namespace
}  // namespace fsdpd::cpu
