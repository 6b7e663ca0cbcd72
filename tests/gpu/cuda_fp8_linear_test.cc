// The FP8 linear ops of the CUDA backend (Ops::Fp8LinearForward/Backward through CudaOps and
// kernels/cuda/fp8_linear.h) against the CPU backend's emulation of them (kernels/cpu/fp8.h),
// on outputs poisoned with NaN.
//
// The inputs are bf16 values on both sides, so both quantize the same numbers with the same
// amax, the same fp32 scale and the same rounding: the fp8 operands agree to the bit. What
// differs is the accumulation and the device's bf16 outputs:
//   - a bf16 output is within half a unit in the last place of the exact value, at most 2^-8
//     of it (8 significant bits), and the biased forward output is rounded twice;
//   - Hopper's FP8 tensor cores keep fewer bits than fp32 in their partial sums before cuBLASLt
//     promotes them: measured on an H100 (bench/RESULTS.md, "FP8 linear layers in the step"),
//     fp32 weight gradients 4–6e-5 from the CPU's in relative distance, about 2^-14, where fp32
//     alone would give ~1e-7. The bounds allow 2^-11 for that (2^-9 of the RMS per element).
// A wrong scale, a swapped transpose, e4m3 read as e5m2 or a missed descale move results by
// 3% or more; the check that the FP8 output is not the bf16 one (2^-4-relative quantization
// steps) shows the FP8 path ran.
#include <cmath>
#include <limits>

#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

class CudaFp8LinearTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (const std::string reason = WithoutFp8TensorCores(); !reason.empty()) GTEST_SKIP() << reason;
  }
};

TEST_F(CudaFp8LinearTest, ForwardAndBackwardMatchTheCpuEmulation) {
  const int64_t rows = 64, in = 96, out = 48;
  std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * in));
  std::vector<float> w = RoundedToBf16(RandomValues(random_, out * in, 0.1f));
  std::vector<float> bias = RoundedToBf16(RandomValues(random_, out, 0.5f));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * out, 0.01f));
  // dweight and dbias accumulate onto what is there.
  std::vector<float> dweight = RandomValues(random_, out * in, 0.05f);
  std::vector<float> dbias = RandomValues(random_, out, 0.05f);

  const Tensor gx = Upload(x, DType::kBF16, {rows, in});
  const Tensor gw = Upload(w, DType::kBF16, {out, in});
  const Tensor gb = Upload(bias, DType::kBF16, {out});
  const Tensor gdout = Upload(dout, DType::kBF16, {rows, out});
  const Tensor gout = Poisoned(DType::kBF16, {rows, out});
  const Tensor gdx = Poisoned(DType::kBF16, {rows, in});
  const Tensor gdw = Upload(dweight, DType::kF32, {out, in});
  const Tensor gdb = Upload(dbias, DType::kF32, {out});
  ASSERT_TRUE(gpu().Fp8LinearForward(gx, gw, gb, gout, {}, gpu_stream()).ok());
  absl::Status status =
      gpu().Fp8LinearBackward(gdout, gx, gw, gdx, gdw, gdb, Write::kAccumulate, {}, gpu_stream());
  ASSERT_TRUE(status.ok()) << status;

  std::vector<float> cout(rows * out), cdx(rows * in), cdw = dweight, cdb = dbias;
  ASSERT_TRUE(cpu_ops()
                  .Fp8LinearForward(Host(x, {rows, in}), Host(w, {out, in}), Host(bias, {out}),
                                    Host(cout, {rows, out}), {}, cpu_stream())
                  .ok());
  ASSERT_TRUE(cpu_ops()
                  .Fp8LinearBackward(Host(dout, {rows, out}), Host(x, {rows, in}),
                                     Host(w, {out, in}), Host(cdx, {rows, in}),
                                     Host(cdw, {out, in}), Host(cdb, {out}), Write::kAccumulate, {},
                                     cpu_stream())
                  .ok());

  // out = bf16(bf16(p) + bias) for the product p: |error| <= 2^-8·|p| + 2^-8·|out| <=
  // 2^-7·|out| + 2^-8·|bias|, plus the accumulation's share.
  double largest_bias = 0.0;
  for (float b : bias) largest_bias = std::max(largest_bias, std::fabs(static_cast<double>(b)));
  const std::vector<float> forward = Download(gout);
  EXPECT_TRUE(AllClose(forward, cout,
                       std::ldexp(largest_bias, -8) + std::ldexp(RootMeanSquare(cout), -9),
                       std::ldexp(1.0, -7)));
  EXPECT_TRUE(
      AllClose(Download(gdx), cdx, std::ldexp(RootMeanSquare(cdx), -9), std::ldexp(1.0, -8)));
  EXPECT_LT(RelativeDistance(Download(gdw), cdw), std::ldexp(1.0, -11));
  // The bias gradient is no product: fp32 column sums, in another order than the CPU's.
  EXPECT_LT(RelativeDistance(Download(gdb), cdb), 1e-5);

  // The FP8 products are not the bf16 ones: quantizing x and w to 3 mantissa bits moves the
  // output by a few percent.
  const Tensor bf16_out = Poisoned(DType::kBF16, {rows, out});
  ASSERT_TRUE(gpu().LinearForward(gx, gw, gb, bf16_out, gpu_stream()).ok());
  const double quantization = RelativeDistance(forward, Download(bf16_out));
  EXPECT_GT(quantization, 1e-3);
  EXPECT_LT(quantization, 0.1);
}

TEST_F(CudaFp8LinearTest, OptionalGradientsAreSkippedAndOverwriteWrites) {
  const int64_t rows = 32, in = 32, out = 16;
  std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * in));
  std::vector<float> w = RoundedToBf16(RandomValues(random_, out * in, 0.1f));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * out, 0.01f));
  const Tensor gx = Upload(x, DType::kBF16, {rows, in});
  const Tensor gw = Upload(w, DType::kBF16, {out, in});
  const Tensor gdout = Upload(dout, DType::kBF16, {rows, out});
  // Only dweight, overwritten: the NaN it held must be gone.
  const Tensor gdw = Poisoned(DType::kF32, {out, in});
  absl::Status status = gpu().Fp8LinearBackward(gdout, gx, gw, Tensor{}, gdw, Tensor{},
                                                Write::kOverwrite, {}, gpu_stream());
  ASSERT_TRUE(status.ok()) << status;
  std::vector<float> cdw(out * in, 0.0f);
  ASSERT_TRUE(cpu_ops()
                  .Fp8LinearBackward(Host(dout, {rows, out}), Host(x, {rows, in}),
                                     Host(w, {out, in}), Tensor{}, Host(cdw, {out, in}), Tensor{},
                                     Write::kOverwrite, {}, cpu_stream())
                  .ok());
  EXPECT_LT(RelativeDistance(Download(gdw), cdw), std::ldexp(1.0, -11));
}

// The bias gradient over many chunks of 256 rows and a partial warp of columns
// (kernels/cuda/column_sum.h): the exact column sums within fp32's rounding of 1,008 terms, and
// the same bits twice.
TEST_F(CudaFp8LinearTest, BiasGradientOverManyChunksIsExactAndRepeatable) {
  const int64_t rows = 1008, in = 16, out = 48;
  std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * in));
  std::vector<float> w = RoundedToBf16(RandomValues(random_, out * in, 0.1f));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * out));
  const Tensor gx = Upload(x, DType::kBF16, {rows, in});
  const Tensor gw = Upload(w, DType::kBF16, {out, in});
  const Tensor gdout = Upload(dout, DType::kBF16, {rows, out});
  std::vector<float> runs[2];
  for (std::vector<float>& run : runs) {
    const Tensor gdb = Poisoned(DType::kF32, {out});
    const absl::Status status = gpu().Fp8LinearBackward(gdout, gx, gw, Tensor{}, Tensor{}, gdb,
                                                        Write::kOverwrite, {}, gpu_stream());
    ASSERT_TRUE(status.ok()) << status;
    run = Download(gdb);
  }
  EXPECT_EQ(runs[0], runs[1]);
  for (int64_t c = 0; c < out; ++c) {
    double sum = 0.0, magnitude = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += dout[r * out + c];
      magnitude += std::fabs(dout[r * out + c]);
    }
    // fp32 sums of 1,008 terms: at most about 1,008 · 2^-24 of the sum of magnitudes.
    EXPECT_NEAR(runs[0][c], sum, 1008 * std::ldexp(magnitude, -24)) << "column " << c;
  }
}

TEST_F(CudaFp8LinearTest, ShapesOffSixteenAreRefusedWithAClearStatus) {
  const Tensor gx = Poisoned(DType::kBF16, {24, 32});  // 24 rows
  const Tensor gw = Poisoned(DType::kBF16, {16, 32});
  const Tensor gout = Poisoned(DType::kBF16, {24, 16});
  const absl::Status status = gpu().Fp8LinearForward(gx, gw, Tensor{}, gout, {}, gpu_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("multiples of 16"), std::string::npos) << status;
}

}  // namespace
}  // namespace fsdpd::testing
