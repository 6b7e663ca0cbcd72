// The int8 quantizer (edge/quantize.h) on the host: every weight reads back within half its
// group's scale, the scales are fp16 values (the smallest with max|w| ≤ 127 · scale), a group of
// zeros stays zero, a group's largest magnitude takes ±127, a short last group, and every bad
// input refused with the tensor and element named; activations quantized per group of 32 the
// same way (QuantizeActivationsInPlace). No Vulkan.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "edge/quantize.h"
#include "formats/half.h"
#include "gtest/gtest.h"

namespace fsdpd::edge {
namespace {

std::vector<float> RandomValues(int64_t count, float scale, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = uniform(generator);
  return values;
}

// Each element against its group: |w − q·scale| ≤ scale / 2, q in [-127, 127], the dequantized
// value q · scale, the scale an fp16 value with max|w| ≤ 127 · scale, and no smaller fp16 value
// that would do.
void ExpectQuantizedWell(const Int8Tensor& tensor, const std::vector<float>& values) {
  ASSERT_EQ(tensor.values.size(), values.size());
  const int64_t groups = tensor.groups_per_row();
  ASSERT_EQ(static_cast<int64_t>(tensor.scales.size()), tensor.rows * groups);
  const std::vector<float> back = tensor.Dequantize();
  for (int64_t r = 0; r < tensor.rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t bits = tensor.scales[static_cast<size_t>(r * groups + g)];
      const double scale = HalfToFloat(bits);
      ASSERT_TRUE(std::isfinite(scale)) << "row " << r << " group " << g;
      ASSERT_GE(scale, 0.0);
      double largest = 0.0;
      for (int64_t c = g * tensor.group; c < std::min(tensor.cols, (g + 1) * tensor.group); ++c) {
        const size_t at = static_cast<size_t>(r * tensor.cols + c);
        largest = std::max(largest, std::fabs(double(values[at])));
        const int q = tensor.values[at];
        ASSERT_GE(q, -127);
        ASSERT_LE(q, 127);
        ASSERT_EQ(back[at], static_cast<float>(q * scale)) << "[" << r << ", " << c << "]";
        ASSERT_EQ(tensor.Scale(r, c), static_cast<float>(scale));
        ASSERT_LE(std::fabs(values[at] - q * scale), scale / 2)
            << "[" << r << ", " << c << "]: " << values[at] << " → " << q << " · " << scale;
      }
      EXPECT_LE(largest, 127 * scale) << "row " << r << " group " << g;
      if (bits > 0) {  // the next fp16 value down would not hold the group's largest weight
        EXPECT_GT(largest, 127.0 * HalfToFloat(static_cast<uint16_t>(bits - 1)))
            << "row " << r << " group " << g;
      } else {
        EXPECT_EQ(largest, 0.0);
      }
    }
  }
}

TEST(EdgeQuantizeTest, EveryWeightReadsBackWithinHalfItsScale) {
  // Rows of very different magnitudes (1e-6 gives subnormal fp16 scales), K a multiple of the
  // group and not (a short last group).
  for (const int64_t cols : {64, 45, 1, 300}) {
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    const int64_t rows = 7;
    std::vector<float> values = RandomValues(rows * cols, 1.0f, 21);
    const float magnitudes[] = {1.0f, 1e-6f, 1000.0f, 0.03f, 5e-5f, 3.0f, 60000.0f};
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) values[r * cols + c] *= magnitudes[r];
    }
    absl::StatusOr<Int8Tensor> tensor = QuantizeInt8("w", values.data(), rows, cols);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(tensor->group, kInt8Group);
    EXPECT_EQ(tensor->groups_per_row(), (cols + 31) / 32);
    ExpectQuantizedWell(*tensor, values);
  }
}

TEST(EdgeQuantizeTest, AZeroGroupStaysZeroAndTheLargestMagnitudeTakes127) {
  const int64_t cols = 96;  // three groups: zeros, ±max, small values
  std::vector<float> values(cols, 0.0f);
  for (int64_t c = 32; c < 64; ++c) values[c] = 0.25f * static_cast<float>(c - 48) / 16.0f;
  values[40] = 7.5f;
  values[41] = -7.5f;
  values[70] = -0.1f;
  values[71] = 2e-2f;
  absl::StatusOr<Int8Tensor> tensor = QuantizeInt8("w", values.data(), 1, cols);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  ExpectQuantizedWell(*tensor, values);
  EXPECT_EQ(tensor->scales[0], 0u);
  for (int64_t c = 0; c < 32; ++c) EXPECT_EQ(tensor->values[c], 0);
  EXPECT_EQ(tensor->values[40], 127);
  EXPECT_EQ(tensor->values[41], -127);
  // 7.5 / 127 is no fp16 value: the scale is the next one up, and ±7.5 read back within half of
  // it, not exactly.
  EXPECT_GT(tensor->Scale(0, 40), 7.5f / 127);
  EXPECT_EQ(tensor->values[70], -127);
  // A group whose scale is an fp16 subnormal (largest |w| below 127 · 2^-14): the scales are
  // coarser there, so the largest may take less than 127, still within half a scale.
  values[70] = -1e-3f;
  values[71] = 2e-4f;
  tensor = QuantizeInt8("w", values.data(), 1, cols);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  ExpectQuantizedWell(*tensor, values);
  EXPECT_LT(tensor->Scale(0, 70), std::ldexp(1.0f, -14));
  // The largest weight the fp16 scales can take: 65504 · 127, exactly.
  const float largest[2] = {65504.0f * 127, -65504.0f * 127};
  tensor = QuantizeInt8("w", largest, 1, 2);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->Scale(0, 0), 65504.0f);
  EXPECT_EQ(tensor->Dequantize(), std::vector<float>(largest, largest + 2));
}

TEST(EdgeQuantizeTest, BadWeightsAreRefusedNamingTheTensorAndElement) {
  std::vector<float> values = RandomValues(4 * 40, 1.0f, 22);
  values[2 * 40 + 33] = std::numeric_limits<float>::quiet_NaN();
  absl::StatusOr<Int8Tensor> tensor = QuantizeInt8("layers.1.ffn.0.weight", values.data(), 4, 40);
  ASSERT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tensor.status().message(),
                                "tensor layers.1.ffn.0.weight has the non-finite weight nan at "
                                "[2, 33]; int8 quantization needs finite weights"))
      << tensor.status();
  values[2 * 40 + 33] = 0.0f;
  values[3 * 40 + 1] = -std::numeric_limits<float>::infinity();
  tensor = QuantizeInt8("head.weight", values.data(), 4, 40);
  ASSERT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tensor.status().message(),
                                "tensor head.weight has the non-finite weight -inf at [3, 1]"))
      << tensor.status();
  // Past what an fp16 scale can hold.
  values[3 * 40 + 1] = 1e7f;
  tensor = QuantizeInt8("head.weight", values.data(), 4, 40);
  ASSERT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tensor.status().message(),
                                "tensor head.weight has the weight 1e+07 at [3, 1]: its group's "
                                "int8 scale would pass fp16's largest value"))
      << tensor.status();
  tensor = QuantizeInt8("w", values.data(), 0, 40);
  ASSERT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tensor.status().message(), "every size must be positive"))
      << tensor.status();
}

// Activations per row and group of 32 (QuantizeActivationsInPlace): each value becomes q · scale
// with q a whole number in [-127, 127] and scale = max|x| / 127 of its group, within scale / 2
// of what it was (and a few fp32 roundings of it: q · scale is rounded once, scale once); the
// group's largest magnitude takes ±127; a short last group, a group of zeros, a group with a
// NaN or an infinity and one too small for a scale (each left as it was).
TEST(EdgeQuantizeTest, ActivationsReadBackWithinHalfTheirGroupsScale) {
  constexpr int64_t kRows = 3, kCols = 70;  // two whole groups and a short one of 6
  std::vector<float> values = RandomValues(kRows * kCols, 3.0f, 11);
  for (int64_t c = 32; c < 64; ++c) values[static_cast<size_t>(kCols + c)] = 0.0f;  // row 1
  values[2 * kCols + 3] = std::numeric_limits<float>::quiet_NaN();                  // row 2
  values[2 * kCols + 40] = std::numeric_limits<float>::infinity();
  values[kCols + 5] = 1e-30f;          // a tiny group member beside ordinary ones
  for (int64_t c = 64; c < 70; ++c) {  // row 1's last group: its scale underflows to zero
    values[static_cast<size_t>(kCols + c)] = (c % 2 == 0 ? 1 : -1) * 1e-44f;
  }
  std::vector<float> quantized = values;
  QuantizeActivationsInPlace(quantized.data(), kRows, kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t first = 0; first < kCols; first += kInt8Group) {
      const int64_t last = std::min(kCols, first + kInt8Group);
      float largest = 0.0f;
      bool finite = true;
      for (int64_t c = first; c < last; ++c) {
        const float value = values[static_cast<size_t>(r * kCols + c)];
        finite = finite && std::isfinite(value);
        largest = std::max(largest, std::fabs(value));
      }
      const float scale = largest / 127.0f;
      for (int64_t c = first; c < last; ++c) {
        const size_t at = static_cast<size_t>(r * kCols + c);
        if (!finite || scale == 0.0f) {  // left as it was
          if (std::isnan(values[at])) {
            EXPECT_TRUE(std::isnan(quantized[at]));
          } else {
            EXPECT_EQ(quantized[at], values[at]) << "[" << r << ", " << c << "]";
          }
          continue;
        }
        const double q = quantized[at] / scale;
        ASSERT_NEAR(q, std::round(q), 1e-4) << "[" << r << ", " << c << "]: not q · scale";
        ASSERT_LE(std::fabs(std::round(q)), 127.0);
        EXPECT_LE(std::fabs(values[at] - quantized[at]), scale / 2 * (1 + 1e-5))
            << "[" << r << ", " << c << "]: " << values[at] << " → " << quantized[at];
        if (std::fabs(values[at]) == largest) {
          EXPECT_EQ(std::fabs(std::round(q)), 127.0);
        }
      }
    }
  }
  EXPECT_EQ(quantized[kCols + 5], 0.0f);  // far below its group's step
}

TEST(EdgeQuantizeTest, HalfToFloatInvertsFloatToHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToHalf(value), bits) << bits;
  }
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(HalfToFloat(0xFBFF), -65504.0f);
}

}  // namespace
}  // namespace fsdpd::edge
