// The split master (kernels/split_master.h): every fp32 bit pattern but NaN's survives the split,
// and a NaN stays a NaN that compute sees; the high half is the round-to-nearest-even bf16 except
// on the exact ties the split must round toward zero; and AdamW over the halves (the CPU reference
// of the CUDA kernel) takes the fp32 AdamW's steps to the bit, with the same gradient sum of
// squares.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/split_master.h"
#include "worker/backend/cpu_backend.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// PyTorch's fp32 → bf16 cast for finite values: round to nearest, ties to even.
uint16_t RoundNearestEven(uint32_t bits) {
  const uint32_t upper = bits >> 16;
  const uint32_t low = bits & 0xffffu;
  const bool up = low > 0x8000u || (low == 0x8000u && (upper & 1u) != 0);
  return static_cast<uint16_t>(upper + (up ? 1u : 0u));
}

TEST(SplitMasterTest, EveryValueSurvivesAndTheHighHalfRoundsToNearest) {
  int ties_toward_zero = 0;
  int nans = 0;
  for (uint32_t upper = 0; upper <= 0xffffu; ++upper) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x1234u, 0x7fffu, 0x8000u, 0x8001u, 0xbeefu, 0xffffu}) {
      const uint32_t bits = (upper << 16) | low;
      const SplitHalves halves = SplitBits(bits);
      ASSERT_EQ(halves.low, low);
      if ((bits & 0x7fffffffu) > 0x7f800000u) {
        // A NaN: compute must see a NaN (the quiet one with its sign), and it joins to a NaN.
        ASSERT_EQ(halves.high, (upper & 0x8000u) | 0x7fc0u) << std::hex << bits;
        ASSERT_GT(JoinBits(halves.high, halves.low) & 0x7fffffffu, 0x7f800000u) << std::hex << bits;
        ++nans;
        continue;
      }
      ASSERT_EQ(JoinBits(halves.high, halves.low), bits) << std::hex << bits;
      const bool finite = (upper & 0x7f80u) != 0x7f80u;
      if (!finite) continue;
      if (low == 0x8000u && (upper & 1u) != 0) {
        // The one case the split rounds differently: toward zero, one bf16 step below.
        ASSERT_EQ(halves.high, static_cast<uint16_t>(upper)) << std::hex << bits;
        ASSERT_EQ(RoundNearestEven(bits), static_cast<uint16_t>(upper + 1));
        ++ties_toward_zero;
      } else {
        ASSERT_EQ(halves.high, RoundNearestEven(bits)) << std::hex << bits;
      }
    }
  }
  EXPECT_GT(ties_toward_zero, 0);
  EXPECT_GT(nans, 0);
  // Through floats as the host code uses them.
  for (float value : {0.0f, -0.0f, 1.0f, -3.14159f, 1e-30f, 3.0e38f, INFINITY, -INFINITY}) {
    const SplitHalves halves = SplitFloat(value);
    EXPECT_EQ(Bits(JoinFloat(halves.high, halves.low)), Bits(value)) << value;
  }
}

class SplitAdamWTest : public ::testing::Test {
 protected:
  Tensor Floats(std::vector<float>& values) {
    return Tensor{values.data(), DType::kF32, {static_cast<int64_t>(values.size())}};
  }
  Tensor Halves(std::vector<uint16_t>& values) {
    return Tensor{values.data(), DType::kBF16, {static_cast<int64_t>(values.size())}};
  }
  CpuBackend backend_;
};

TEST_F(SplitAdamWTest, StepsEqualTheFp32AdamWToTheBitWithTheSameSquareSum) {
  constexpr int64_t kCount = 4099;  // vectors of four and a tail
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> master(kCount), m(kCount, 0.0f), v(kCount, 0.0f);
  for (float& x : master) x = normal(random) * 0.02f;
  // Ties the split rounds toward zero are among the values, and stay exact.
  master[5] = JoinFloat(0x3f81u, 0x8000u);  // upper half odd, low half 0x8000
  std::vector<uint16_t> high(kCount), low(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    const SplitHalves halves = SplitFloat(master[i]);
    high[i] = halves.high;
    low[i] = halves.low;
  }
  std::vector<float> split_m = m, split_v = v;
  Stream& stream = backend_.compute_stream();
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> grad(kCount);
    for (float& g : grad) g = normal(random) * 0.1f;
    AdamWParams params;
    params.lr = 1e-3;
    params.step = step;
    std::vector<float> plain_sum = {-1.0f}, split_sum = {-2.0f};
    ASSERT_TRUE(backend_.ops()
                    .AdamWWithGradSquareSum(Floats(master), Floats(grad), Floats(m), Floats(v),
                                            params, Floats(plain_sum), stream)
                    .ok());
    ASSERT_TRUE(backend_.ops()
                    .AdamWSplitMaster(Halves(high), Halves(low), Floats(grad), Floats(split_m),
                                      Floats(split_v), params, Floats(split_sum), stream)
                    .ok());
    EXPECT_EQ(Bits(split_sum[0]), Bits(plain_sum[0]));
    for (int64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(JoinBits(high[i], low[i]), Bits(master[i])) << "step " << step << " at " << i;
      ASSERT_EQ(high[i], SplitFloat(master[i]).high);
      ASSERT_EQ(Bits(split_m[i]), Bits(m[i]));
      ASSERT_EQ(Bits(split_v[i]), Bits(v[i]));
    }
  }
  // Without the sum the update is the same and nothing else is written.
  std::vector<float> grad(kCount, 0.25f);
  AdamWParams params;
  params.step = 4;
  ASSERT_TRUE(backend_.ops()
                  .AdamW(Floats(master), Floats(grad), Floats(m), Floats(v), params, stream)
                  .ok());
  ASSERT_TRUE(backend_.ops()
                  .AdamWSplitMaster(Halves(high), Halves(low), Floats(grad), Floats(split_m),
                                    Floats(split_v), params, Tensor{}, stream)
                  .ok());
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(JoinBits(high[i], low[i]), Bits(master[i]));
}

// A gradient that overflowed makes the fp32 update NaN; the parameters compute reads must show it.
// Here the NaN is the CPU's (0xffc00000); CUDA's default NaN (0x7fffffff), which rounded up as a
// number would wrap to a bf16 zero, is among the patterns of the test above.
TEST_F(SplitAdamWTest, ADivergedWeightIsANanInTheParameters) {
  std::vector<float> grad = {0.1f, INFINITY, 0.2f, -INFINITY}, m(4, 0.0f), v(4, 0.0f);
  std::vector<uint16_t> high(4), low(4);
  for (int i = 0; i < 4; ++i) {
    const SplitHalves halves = SplitFloat(0.5f);
    high[i] = halves.high;
    low[i] = halves.low;
  }
  ASSERT_TRUE(backend_.ops()
                  .AdamWSplitMaster(Halves(high), Halves(low), Floats(grad), Floats(m), Floats(v),
                                    AdamWParams{}, Tensor{}, backend_.compute_stream())
                  .ok());
  for (int i : {1, 3}) {
    EXPECT_TRUE(std::isnan(JoinFloat(high[i], low[i]))) << i;
    EXPECT_EQ(high[i] & 0x7fc0u, 0x7fc0u) << "a NaN in bf16 at " << i;
  }
  for (int i : {0, 2}) EXPECT_TRUE(std::isfinite(JoinFloat(high[i], low[i]))) << i;
}

TEST_F(SplitAdamWTest, TheContractNamesAWrongArgument) {
  std::vector<float> grad(8, 0.1f), m(8), v(8), sum(1), shorter(7);
  std::vector<uint16_t> high(8), low(8);
  Stream& stream = backend_.compute_stream();
  const AdamWParams params;
  absl::Status status = backend_.ops().AdamWSplitMaster(
      Floats(grad), Halves(low), Floats(grad), Floats(m), Floats(v), params, Tensor{}, stream);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("AdamWSplitMaster"));
  EXPECT_THAT(status.message(), HasSubstr("high"));
  status = backend_.ops().AdamWSplitMaster(Halves(high), Halves(low), Floats(shorter), Floats(m),
                                           Floats(v), params, Tensor{}, stream);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("grad"));
  status = backend_.ops().AdamWSplitMaster(Halves(high), Halves(high), Floats(grad), Floats(m),
                                           Floats(v), params, Tensor{}, stream);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "high and low overlap";
  status = backend_.ops().AdamWSplitMaster(Halves(high), Halves(low), Floats(grad), Floats(m),
                                           Floats(v), params, Floats(grad), stream);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "a sum of eight values";
  EXPECT_THAT(status.message(), HasSubstr("grad_square_sum"));
  EXPECT_TRUE(backend_.ops()
                  .AdamWSplitMaster(Halves(high), Halves(low), Floats(grad), Floats(m), Floats(v),
                                    params, Floats(sum), stream)
                  .ok());
}

}  // namespace
}  // namespace fsdpd
