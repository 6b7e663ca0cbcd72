// The cuBLASLt linear layers (forward with the bias epilogue, the input and weight gradients
// with the bias-gradient epilogue) and the head fused with cross-entropy, against the CPU.
#include <cstring>

#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

using CudaMatmulTest = CudaTest;

struct LinearShape {
  int64_t rows, in_features, out_features;
  bool bias;
  int64_t bias_offset;  // elements; 1 makes the bias 2-byte aligned: the unfused path
};

class CudaLinearTest : public CudaTest, public ::testing::WithParamInterface<LinearShape> {};

// A product over k bf16·bf16 terms summed in fp32 differs from the CPU's fp32 sum only by
// ordering (~k·2^-24 relative to the sum of |terms|), far below the final bf16 rounding
// (2^-9 relative). Results near zero through cancellation get an absolute allowance of 1% of
// the output's root mean square.
TEST_P(CudaLinearTest, ForwardAndBackwardMatchTheCpu) {
  const LinearShape shape = GetParam();
  const int64_t m = shape.rows, k = shape.in_features, n = shape.out_features;
  std::vector<float> x = RoundedToBf16(RandomValues(random_, m * k));
  std::vector<float> weight = RoundedToBf16(RandomValues(random_, n * k, 0.1f));
  std::vector<float> bias_values = RoundedToBf16(RandomValues(random_, n));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, m * n));
  std::vector<float> dweight_start = RandomValues(random_, n * k);
  std::vector<float> dbias_start = RandomValues(random_, n);

  Tensor device_x = Upload(x, DType::kBF16, {m, k});
  Tensor device_weight = Upload(weight, DType::kBF16, {n, k});
  Tensor bias;
  if (shape.bias) {
    std::vector<float> padded(static_cast<size_t>(n + shape.bias_offset), 0.0f);
    std::copy(bias_values.begin(), bias_values.end(), padded.begin() + shape.bias_offset);
    Tensor storage = Upload(padded, DType::kBF16, {n + shape.bias_offset});
    bias = Tensor{static_cast<char*>(storage.data) + 2 * shape.bias_offset, DType::kBF16, {n}};
  }
  Tensor out = Poisoned(DType::kBF16, {m, n});
  ASSERT_TRUE(gpu().LinearForward(device_x, device_weight, bias, out, gpu_stream()).ok());

  std::vector<float> expected_out(m * n);
  Tensor host_bias = shape.bias ? Host(bias_values, {n}) : Tensor{};
  ASSERT_TRUE(cpu_ops()
                  .LinearForward(Host(x, {m, k}), Host(weight, {n, k}), host_bias,
                                 Host(expected_out, {m, n}), cpu_stream())
                  .ok());
  EXPECT_TRUE(
      AllClose(Download(out), expected_out, 0.01 * RootMeanSquare(expected_out), 1.0 / 256));

  Tensor device_dout = Upload(dout, DType::kBF16, {m, n});
  Tensor dx = Poisoned(DType::kBF16, {m, k});
  Tensor dweight = Upload(dweight_start, DType::kF32, {n, k});
  Tensor dbias = shape.bias ? Upload(dbias_start, DType::kF32, {n}) : Tensor{};
  ASSERT_TRUE(gpu()
                  .LinearBackward(device_dout, device_x, device_weight, dx, dweight, dbias,
                                  Write::kAccumulate, gpu_stream())
                  .ok());
  std::vector<float> expected_dx(m * k);
  std::vector<float> expected_dweight = dweight_start;
  std::vector<float> expected_dbias = dbias_start;
  ASSERT_TRUE(cpu_ops()
                  .LinearBackward(Host(dout, {m, n}), Host(x, {m, k}), Host(weight, {n, k}),
                                  Host(expected_dx, {m, k}), Host(expected_dweight, {n, k}),
                                  shape.bias ? Host(expected_dbias, {n}) : Tensor{},
                                  Write::kAccumulate, cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(dx), expected_dx, 0.01 * RootMeanSquare(expected_dx), 1.0 / 256));
  // fp32 outputs: only the summation order differs.
  EXPECT_TRUE(AllClose(Download(dweight), expected_dweight, 1e-3, 1e-4));
  if (shape.bias) {
    EXPECT_TRUE(AllClose(Download(dbias), expected_dbias, 1e-3, 1e-4));
  }

  // Overwritten gradients (a parameter's only use): poisoned buffers end as the products
  // alone. With bias_offset the bias gradient sits 4 bytes into its buffer, off the 16-byte
  // alignment the fused epilogue writes to, so the copy from its scratch is tested too.
  Tensor fresh_dweight = Poisoned(DType::kF32, {n, k});
  Tensor fresh_dbias;
  if (shape.bias) {
    Tensor storage = Poisoned(DType::kF32, {n + shape.bias_offset});
    fresh_dbias =
        Tensor{static_cast<char*>(storage.data) + 4 * shape.bias_offset, DType::kF32, {n}};
  }
  ASSERT_TRUE(gpu()
                  .LinearBackward(device_dout, device_x, device_weight, Tensor{}, fresh_dweight,
                                  fresh_dbias, Write::kOverwrite, gpu_stream())
                  .ok());
  std::vector<float> product(n * k, 777.0f), bias_sum(n, 777.0f);
  ASSERT_TRUE(cpu_ops()
                  .LinearBackward(Host(dout, {m, n}), Host(x, {m, k}), Host(weight, {n, k}),
                                  Tensor{}, Host(product, {n, k}),
                                  shape.bias ? Host(bias_sum, {n}) : Tensor{}, Write::kOverwrite,
                                  cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(fresh_dweight), product, 1e-3, 1e-4));
  if (shape.bias) {
    EXPECT_TRUE(AllClose(Download(fresh_dbias), bias_sum, 1e-3, 1e-4));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaLinearTest,
    ::testing::Values(LinearShape{256, 128, 384, true, 0},  // in_proj-like, fused bias
                      LinearShape{256, 128, 128, true, 1},  // misaligned bias: unfused path
                      LinearShape{200, 512, 96, false, 0},  // ffn-like, no bias
                      LinearShape{33, 24, 17, true, 0},     // odd sizes
                      LinearShape{1, 64, 64, true, 0}));    // a single row

TEST_F(CudaMatmulTest, PlansAreCachedPerShape) {
  Tensor x = Upload(RoundedToBf16(RandomValues(random_, 64 * 32)), DType::kBF16, {64, 32});
  Tensor weight = Upload(RoundedToBf16(RandomValues(random_, 48 * 32)), DType::kBF16, {48, 32});
  Tensor out = Poisoned(DType::kBF16, {64, 48});
  const int64_t before = cuda_->gemm().cached_plans();
  ASSERT_TRUE(gpu().LinearForward(x, weight, Tensor{}, out, gpu_stream()).ok());
  const int64_t after_first = cuda_->gemm().cached_plans();
  EXPECT_EQ(after_first, before + 1);
  ASSERT_TRUE(gpu().LinearForward(x, weight, Tensor{}, out, gpu_stream()).ok());
  EXPECT_EQ(cuda_->gemm().cached_plans(), after_first);
}

struct HeadShape {
  int64_t tokens, dim, vocab;
};

class CudaHeadCrossEntropyTest : public CudaTest,
                                 public ::testing::WithParamInterface<HeadShape> {};

TEST_P(CudaHeadCrossEntropyTest, LossAndGradientsMatchTheCpu) {
  const HeadShape shape = GetParam();
  const int64_t t = shape.tokens, d = shape.dim, v = shape.vocab;
  std::vector<float> x = RoundedToBf16(RandomValues(random_, t * d));
  std::vector<float> head = RoundedToBf16(RandomValues(random_, v * d, 0.2f));
  std::vector<int32_t> targets(t);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(v - 1));
  for (int32_t& target : targets) target = pick(random_);
  std::vector<float> dhead_start = RandomValues(random_, v * d, 1e-3f);
  const double loss_scale = 2.0;

  Tensor device_x = Upload(x, DType::kBF16, {t, d});
  Tensor device_head = Upload(head, DType::kBF16, {v, d});
  Tensor device_targets = UploadIds(targets, {t});
  Tensor loss = Poisoned(DType::kF32, {1});
  Tensor dx = Poisoned(DType::kBF16, {t, d});
  Tensor dhead = Upload(dhead_start, DType::kF32, {v, d});
  ASSERT_TRUE(gpu()
                  .HeadCrossEntropy(device_x, device_head, device_targets, loss_scale, loss, dx,
                                    dhead, gpu_stream())
                  .ok());

  std::vector<float> expected_loss(1), expected_dx(t * d);
  std::vector<float> expected_dhead = dhead_start;
  ASSERT_TRUE(cpu_ops()
                  .HeadCrossEntropy(Host(x, {t, d}), Host(head, {v, d}), HostIds(targets, {t}),
                                    loss_scale, Host(expected_loss, {1}), Host(expected_dx, {t, d}),
                                    Host(expected_dhead, {v, d}), cpu_stream())
                  .ok());
  // The logits are rounded to bf16 before the softmax (as a bf16 linear layer gives them):
  // each is off by up to 2^-9 of itself, which moves a probability by up to ~2% at the largest
  // logits (about 8 here), and dlogits is stored in bf16 before the dx and dhead products. So
  // the gradients get 1/32 relative plus 5% of their root mean square absolute (elements that
  // cancel to near zero); the loss, a mean over tokens, much less.
  EXPECT_TRUE(AllClose(Download(loss), expected_loss, 5e-3, 2e-3));
  EXPECT_TRUE(AllClose(Download(dx), expected_dx, 0.05 * RootMeanSquare(expected_dx), 1.0 / 32));
  std::vector<float> dhead_delta = Download(dhead);
  std::vector<float> expected_delta = expected_dhead;
  for (size_t i = 0; i < dhead_delta.size(); ++i) {
    dhead_delta[i] -= dhead_start[i];
    expected_delta[i] -= dhead_start[i];
  }
  EXPECT_TRUE(
      AllClose(dhead_delta, expected_delta, 0.05 * RootMeanSquare(expected_delta), 1.0 / 32));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaHeadCrossEntropyTest,
                         ::testing::Values(HeadShape{64, 32, 64},       // the tiny golden model
                                           HeadShape{300, 128, 1000},   // several rows a block
                                           HeadShape{5000, 64, 30000},  // more than one chunk
                                           // rows held in registers: the largest that fit
                                           HeadShape{40, 32, 32768},
                                           // the general kernel: a vocab not of whole 16-byte
                                           // vectors, and one too long to hold
                                           HeadShape{70, 32, 1001}, HeadShape{40, 32, 40000}));

}  // namespace
}  // namespace fsdpd::testing
