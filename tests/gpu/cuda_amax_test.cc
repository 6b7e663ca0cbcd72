// The amax RMSNorm's and SiLU's kernels leave beside their bf16 outputs for the FP8 product that
// reads them next (kernels/cuda/amax.cuh, Fp8OperandAmax in worker/backend/ops.h): exactly
// max |value| over the bf16 values they stored, as a separate pass would find it, on the
// vectorised kernels and the scalar ones alike; raised, never lowered; a NaN carried through.
// And the FP8 product given that amax gives the bits it gives when it measures the operand
// itself, so the model's fused path changes no bit (tests/unit/model_recompute_test.cc checks
// the same on the CPU, through every recompute mode).
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

class CudaAmaxTest : public CudaTest {
 protected:
  Tensor Amax(float start = 0.0f) { return Upload({start}, DType::kF32, {1}); }
  float Read(const Tensor& amax) { return Download(amax)[0]; }
};

float MaxAbs(const std::vector<float>& values) {
  float largest = 0.0f;
  for (float v : values) largest = std::max(largest, std::fabs(v));
  return largest;
}

TEST_F(CudaAmaxTest, RmsNormForwardAndBackwardLeaveTheExactAmaxOfTheirOutput) {
  // 2048 and 256: the vectorised kernel (whole rows in registers); 100: the scalar one.
  for (const int64_t dim : {int64_t{2048}, int64_t{256}, int64_t{100}}) {
    const int64_t rows = 300;
    const Tensor x =
        Upload(RoundedToBf16(RandomValues(random_, rows * dim, 2.0f)), DType::kBF16, {rows, dim});
    const Tensor weight = Upload(RoundedToBf16(RandomValues(random_, dim)), DType::kBF16, {dim});
    const Tensor out = Poisoned(DType::kBF16, {rows, dim});
    const Tensor rstd = Poisoned(DType::kF32, {rows});
    const Tensor amax = Amax();
    ASSERT_TRUE(gpu().RmsNormForward(x, weight, 1e-6, out, rstd, amax, gpu_stream()).ok());
    const float expected = MaxAbs(Download(out));
    EXPECT_GT(expected, 0.0f) << dim;
    EXPECT_EQ(Read(amax), expected) << "dim " << dim;
    // Raised, never lowered: a larger value already there stays.
    const Tensor higher = Amax(4.0f * expected);
    ASSERT_TRUE(gpu().RmsNormForward(x, weight, 1e-6, out, rstd, higher, gpu_stream()).ok());
    EXPECT_EQ(Read(higher), 4.0f * expected) << "dim " << dim;

    // The backward's dx, overwritten and added into the residual stream's gradient: the amax
    // of what is stored, the sum in the second case.
    const Tensor dout =
        Upload(RoundedToBf16(RandomValues(random_, rows * dim)), DType::kBF16, {rows, dim});
    const Tensor dweight = Poisoned(DType::kF32, {dim});
    for (const Write write : {Write::kOverwrite, Write::kAccumulate}) {
      const bool add = write == Write::kAccumulate;
      const Tensor dx = add ? Upload(RoundedToBf16(RandomValues(random_, rows * dim, 3.0f)),
                                     DType::kBF16, {rows, dim})
                            : Poisoned(DType::kBF16, {rows, dim});
      const Tensor dx_amax = Amax();
      ASSERT_TRUE(gpu()
                      .RmsNormBackward(dout, x, weight, rstd, dx, write, dweight, Write::kOverwrite,
                                       dx_amax, gpu_stream())
                      .ok());
      EXPECT_EQ(Read(dx_amax), MaxAbs(Download(dx))) << "dim " << dim << (add ? ", added" : "");
    }
  }
}

TEST_F(CudaAmaxTest, SiluForwardAndBackwardLeaveTheExactAmaxOfEachOutput) {
  // 40,000: the 16-byte kernels; 5,001: the scalar ones.
  for (const int64_t count : {int64_t{40000}, int64_t{5001}}) {
    const Tensor x =
        Upload(RoundedToBf16(RandomValues(random_, count, 4.0f)), DType::kBF16, {count});
    const Tensor dout =
        Upload(RoundedToBf16(RandomValues(random_, count, 0.01f)), DType::kBF16, {count});
    const Tensor out = Poisoned(DType::kBF16, {count});
    const Tensor out_amax = Amax();
    ASSERT_TRUE(gpu().SiluForward(x, out, out_amax, gpu_stream()).ok());
    const float silu_max = MaxAbs(Download(out));
    EXPECT_EQ(Read(out_amax), silu_max) << count;

    const Tensor dx = Poisoned(DType::kBF16, {count});
    const Tensor recomputed = Poisoned(DType::kBF16, {count});
    const Tensor dx_amax = Amax(), recomputed_amax = Amax();
    ASSERT_TRUE(
        gpu().SiluBackward(dout, x, dx, recomputed, dx_amax, recomputed_amax, gpu_stream()).ok());
    const float dx_max = MaxAbs(Download(dx));
    EXPECT_EQ(Read(dx_amax), dx_max) << count;
    EXPECT_EQ(Read(recomputed_amax), silu_max) << count;
    EXPECT_NE(dx_max, silu_max);
    // Without the recomputed output, the gradient's amax alone.
    const Tensor alone = Amax();
    ASSERT_TRUE(gpu().SiluBackward(dout, x, dx, Tensor{}, alone, Tensor{}, gpu_stream()).ok());
    EXPECT_EQ(Read(alone), dx_max) << count;
  }
}

TEST_F(CudaAmaxTest, ANanReachesTheAmax) {
  std::vector<float> values = RoundedToBf16(RandomValues(random_, 4096));
  values[1234] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Upload(values, DType::kBF16, {4096});
  const Tensor out = Poisoned(DType::kBF16, {4096});
  const Tensor amax = Amax();
  ASSERT_TRUE(gpu().SiluForward(x, out, amax, gpu_stream()).ok());
  EXPECT_TRUE(std::isnan(Read(amax)));
}

class CudaFp8AmaxTest : public CudaAmaxTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (const std::string reason = WithoutFp8TensorCores(); !reason.empty()) GTEST_SKIP() << reason;
  }
};

// The products given the producers' amax (here the host's max |value| of the same bf16
// operands) give the bits they give measuring the operands themselves; given a larger amax
// (another grid of steps: a power of two would only shift exponents) they do not, so the given
// value is the one used.
TEST_F(CudaFp8AmaxTest, ProductsGivenTheExactAmaxChangeNoBit) {
  const int64_t rows = 64, in = 96, out = 48;
  const std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * in));
  const std::vector<float> w = RoundedToBf16(RandomValues(random_, out * in, 0.1f));
  const std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * out, 0.01f));
  const Tensor gx = Upload(x, DType::kBF16, {rows, in});
  const Tensor gw = Upload(w, DType::kBF16, {out, in});
  const Tensor gdout = Upload(dout, DType::kBF16, {rows, out});
  const Fp8OperandAmax exact{Amax(MaxAbs(x)), Amax(MaxAbs(dout))};

  const Tensor own = Poisoned(DType::kBF16, {rows, out});
  const Tensor given = Poisoned(DType::kBF16, {rows, out});
  const Tensor coarse = Poisoned(DType::kBF16, {rows, out});
  ASSERT_TRUE(gpu().Fp8LinearForward(gx, gw, Tensor{}, own, {}, gpu_stream()).ok());
  ASSERT_TRUE(gpu().Fp8LinearForward(gx, gw, Tensor{}, given, {exact.x}, gpu_stream()).ok());
  ASSERT_TRUE(
      gpu()
          .Fp8LinearForward(gx, gw, Tensor{}, coarse, {Amax(3.0f * MaxAbs(x))}, gpu_stream())
          .ok());
  const std::vector<float> own_values = Download(own);
  EXPECT_EQ(std::memcmp(own_values.data(), Download(given).data(), own_values.size() * 4), 0);
  EXPECT_NE(std::memcmp(own_values.data(), Download(coarse).data(), own_values.size() * 4), 0);

  const Tensor own_dx = Poisoned(DType::kBF16, {rows, in});
  const Tensor given_dx = Poisoned(DType::kBF16, {rows, in});
  const Tensor own_dw = Poisoned(DType::kF32, {out, in});
  const Tensor given_dw = Poisoned(DType::kF32, {out, in});
  ASSERT_TRUE(gpu()
                  .Fp8LinearBackward(gdout, gx, gw, own_dx, own_dw, Tensor{}, Write::kOverwrite, {},
                                     gpu_stream())
                  .ok());
  ASSERT_TRUE(gpu()
                  .Fp8LinearBackward(gdout, gx, gw, given_dx, given_dw, Tensor{}, Write::kOverwrite,
                                     exact, gpu_stream())
                  .ok());
  const std::vector<float> dx_values = Download(own_dx), dw_values = Download(own_dw);
  EXPECT_EQ(std::memcmp(dx_values.data(), Download(given_dx).data(), dx_values.size() * 4), 0);
  EXPECT_EQ(std::memcmp(dw_values.data(), Download(given_dw).data(), dw_values.size() * 4), 0);
}

}  // namespace
}  // namespace fsdpd::testing
