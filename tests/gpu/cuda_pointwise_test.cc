// The CUDA backend's pointwise and normalisation ops against the CPU reference: residual add,
// casts, fill, scale, sum of squares, SiLU, RMSNorm, embedding, AdamW.
#include <cstring>
#include <utility>

#include "kernels/split_master.h"
#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

// bf16 keeps 8 significant bits: one rounding of a result is off by at most 2^-9 of it. Outputs
// computed in fp32 and rounded once get 2^-8 relative (twice the bound, for the CPU's own
// ordering differences) plus a small absolute term for results that cancel to near zero.
constexpr double kBf16Relative = 1.0 / 256;

using CudaPointwiseTest = CudaTest;

TEST_F(CudaPointwiseTest, AddBf16MatchesCpuAndMayAlias) {
  // 10007 takes the scalar kernel; 4096 the 8-wide vector kernel.
  for (const int64_t count : {int64_t{10007}, int64_t{4096}}) {
    SCOPED_TRACE(count);
    std::vector<float> a = RoundedToBf16(RandomValues(random_, count));
    std::vector<float> b = RoundedToBf16(RandomValues(random_, count));
    Tensor device_a = Upload(a, DType::kBF16, {count});
    Tensor device_b = Upload(b, DType::kBF16, {count});
    Tensor out = Poisoned(DType::kBF16, {count});
    ASSERT_TRUE(gpu().Add(device_a, device_b, out, gpu_stream()).ok());
    std::vector<float> expected(count);
    Tensor host_out = Host(expected, {count});
    ASSERT_TRUE(cpu_ops().Add(Host(a, {count}), Host(b, {count}), host_out, cpu_stream()).ok());
    EXPECT_TRUE(AllClose(Download(out), expected, 1e-6, kBf16Relative));
    // In place, as the model accumulates the residual gradient.
    ASSERT_TRUE(gpu().Add(device_a, device_b, device_a, gpu_stream()).ok());
    EXPECT_TRUE(AllClose(Download(device_a), expected, 1e-6, kBf16Relative));
  }
}

TEST_F(CudaPointwiseTest, CastsRoundToNearestEvenLikeTheCpu) {
  // 4099 = 512 vectors of eight through the fp32 → bf16 vector kernel and a tail of three
  // through the scalar one.
  const int64_t count = 4099;
  std::vector<float> values = RandomValues(random_, count, 100.0f);
  Tensor source = Upload(values, DType::kF32, {count});
  Tensor narrow = Poisoned(DType::kBF16, {count});
  Tensor wide = Poisoned(DType::kF32, {count});
  ASSERT_TRUE(gpu().Cast(source, narrow, gpu_stream()).ok());
  ASSERT_TRUE(gpu().Cast(narrow, wide, gpu_stream()).ok());
  // Both sides round the same fp32 values to nearest even: the results are identical.
  EXPECT_TRUE(AllClose(Download(wide), RoundedToBf16(values), 0.0, 0.0));
  ASSERT_TRUE(gpu().RoundToBf16(source, gpu_stream()).ok());
  EXPECT_TRUE(AllClose(Download(source), RoundedToBf16(values), 0.0, 0.0));
  Tensor ids = NewDevice(DType::kI32, {count});
  EXPECT_EQ(gpu().Cast(source, ids, gpu_stream()).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaPointwiseTest, FillScaleAndSumOfSquares) {
  const int64_t count = 300001;
  Tensor values = Poisoned(DType::kF32, {count});
  ASSERT_TRUE(gpu().Fill(values, 0.5f, gpu_stream()).ok());
  ASSERT_TRUE(gpu().Scale(values, 3.0f, gpu_stream()).ok());
  EXPECT_TRUE(AllClose(Download(values), std::vector<float>(count, 1.5f), 0.0, 0.0));

  std::vector<float> random_values = RandomValues(random_, count);
  std::vector<float> rounded = RoundedToBf16(random_values);
  Tensor f32 = Upload(random_values, DType::kF32, {count});
  Tensor bf16 = Upload(random_values, DType::kBF16, {count});
  Tensor result = Poisoned(DType::kF32, {1});
  std::vector<float> expected(1);
  // fp32 partial sums of ~300k squares against the CPU's double sum: a few ulps per partial.
  ASSERT_TRUE(gpu().SumOfSquares(f32, result, gpu_stream()).ok());
  ASSERT_TRUE(
      cpu_ops().SumOfSquares(Host(random_values, {count}), Host(expected, {1}), cpu_stream()).ok());
  EXPECT_TRUE(AllClose(Download(result), expected, 0.0, 1e-5));
  const std::vector<float> first = Download(result);
  ASSERT_TRUE(gpu().SumOfSquares(bf16, result, gpu_stream()).ok());
  ASSERT_TRUE(
      cpu_ops().SumOfSquares(Host(rounded, {count}), Host(expected, {1}), cpu_stream()).ok());
  EXPECT_TRUE(AllClose(Download(result), expected, 0.0, 1e-5));
  // The reduction order is fixed: the same input gives the same bits.
  ASSERT_TRUE(gpu().SumOfSquares(f32, result, gpu_stream()).ok());
  EXPECT_EQ(std::memcmp(first.data(), Download(result).data(), sizeof(float)), 0);
}

TEST_F(CudaPointwiseTest, SiluForwardAndBackward) {
  // 33 × 515 takes the scalar kernels; 32 × 512 the 8-wide vector kernels.
  for (const auto& [rows, width] : {std::pair<int64_t, int64_t>{33, 515}, {32, 512}}) {
    SCOPED_TRACE(rows * width);
    std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * width, 3.0f));
    std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * width));
    Tensor device_x = Upload(x, DType::kBF16, {rows, width});
    Tensor device_dout = Upload(dout, DType::kBF16, {rows, width});
    Tensor out = Poisoned(DType::kBF16, {rows, width});
    Tensor dx = Poisoned(DType::kBF16, {rows, width});
    ASSERT_TRUE(gpu().SiluForward(device_x, out, Tensor{}, gpu_stream()).ok());
    ASSERT_TRUE(
        gpu()
            .SiluBackward(device_dout, device_x, dx, Tensor{}, Tensor{}, Tensor{}, gpu_stream())
            .ok());
    std::vector<float> expected_out(rows * width), expected_dx(rows * width);
    ASSERT_TRUE(cpu_ops()
                    .SiluForward(Host(x, {rows, width}), Host(expected_out, {rows, width}),
                                 Tensor{}, cpu_stream())
                    .ok());
    ASSERT_TRUE(cpu_ops()
                    .SiluBackward(Host(dout, {rows, width}), Host(x, {rows, width}),
                                  Host(expected_dx, {rows, width}), Tensor{}, Tensor{}, Tensor{},
                                  cpu_stream())
                    .ok());
    // __expf differs from expf by a couple of ulps, far below one bf16 rounding.
    EXPECT_TRUE(AllClose(Download(out), expected_out, 1e-5, kBf16Relative));
    EXPECT_TRUE(AllClose(Download(dx), expected_dx, 1e-5, kBf16Relative));
  }
}

// The FFN backward's form: dx written over dout and silu's output recomputed in the same pass.
// Both must equal the separate kernels to the bit (the trajectory does not change), in the
// scalar and the vector kernels, and match the CPU's reference.
TEST_F(CudaPointwiseTest, SiluBackwardInPlaceWithForwardEqualsTheSeparateKernels) {
  for (const auto& [rows, width] : {std::pair<int64_t, int64_t>{33, 515}, {32, 512}}) {
    SCOPED_TRACE(rows * width);
    std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * width, 3.0f));
    std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * width));
    Tensor device_x = Upload(x, DType::kBF16, {rows, width});
    Tensor separate_out = Poisoned(DType::kBF16, {rows, width});
    Tensor separate_dx = Poisoned(DType::kBF16, {rows, width});
    ASSERT_TRUE(gpu().SiluForward(device_x, separate_out, Tensor{}, gpu_stream()).ok());
    ASSERT_TRUE(gpu()
                    .SiluBackward(Upload(dout, DType::kBF16, {rows, width}), device_x, separate_dx,
                                  Tensor{}, Tensor{}, Tensor{}, gpu_stream())
                    .ok());
    Tensor in_place = Upload(dout, DType::kBF16, {rows, width});
    Tensor fused_out = Poisoned(DType::kBF16, {rows, width});
    ASSERT_TRUE(
        gpu()
            .SiluBackward(in_place, device_x, in_place, fused_out, Tensor{}, Tensor{}, gpu_stream())
            .ok());
    const std::vector<float> out = Download(fused_out), dx = Download(in_place);
    EXPECT_EQ(out, Download(separate_out));
    EXPECT_EQ(dx, Download(separate_dx));

    std::vector<float> expected_out(rows * width), expected_dx = dout;
    Tensor host_dx = Host(expected_dx, {rows, width});
    ASSERT_TRUE(cpu_ops()
                    .SiluBackward(host_dx, Host(x, {rows, width}), host_dx,
                                  Host(expected_out, {rows, width}), Tensor{}, Tensor{},
                                  cpu_stream())
                    .ok());
    EXPECT_TRUE(AllClose(out, expected_out, 1e-5, kBf16Relative));
    EXPECT_TRUE(AllClose(dx, expected_dx, 1e-5, kBf16Relative));
  }
}

// Widths: the vectorised kernels with one chunk of 8 per thread (200, 768, and 2048: the seed's)
// and two (2736), and the scalar kernels (36: not a multiple of 8; 8200: wider than the
// vectorised limit).
class CudaRmsNormTest : public CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaRmsNormTest, ForwardAndBackwardMatchTheCpu) {
  const int64_t rows = 600, dim = GetParam();  // more rows than the backward's blocks
  const double eps = 1.1920928955078125e-07;
  std::vector<float> x = RoundedToBf16(RandomValues(random_, rows * dim, 2.0f));
  std::vector<float> weight = RoundedToBf16(RandomValues(random_, dim));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * dim));
  std::vector<float> dweight_start = RandomValues(random_, dim);

  Tensor device_x = Upload(x, DType::kBF16, {rows, dim});
  Tensor device_weight = Upload(weight, DType::kBF16, {dim});
  Tensor device_dout = Upload(dout, DType::kBF16, {rows, dim});
  Tensor out = Poisoned(DType::kBF16, {rows, dim});
  Tensor rstd = Poisoned(DType::kF32, {rows});
  Tensor dx = Poisoned(DType::kBF16, {rows, dim});
  Tensor dweight = Upload(dweight_start, DType::kF32, {dim});
  ASSERT_TRUE(
      gpu().RmsNormForward(device_x, device_weight, eps, out, rstd, Tensor{}, gpu_stream()).ok());
  ASSERT_TRUE(gpu()
                  .RmsNormBackward(device_dout, device_x, device_weight, rstd, dx,
                                   Write::kOverwrite, dweight, Write::kAccumulate, Tensor{},
                                   gpu_stream())
                  .ok());

  std::vector<float> expected_out(rows * dim), expected_rstd(rows), expected_dx(rows * dim);
  std::vector<float> expected_dweight = dweight_start;
  ASSERT_TRUE(cpu_ops()
                  .RmsNormForward(Host(x, {rows, dim}), Host(weight, {dim}), eps,
                                  Host(expected_out, {rows, dim}), Host(expected_rstd, {rows}),
                                  Tensor{}, cpu_stream())
                  .ok());
  ASSERT_TRUE(cpu_ops()
                  .RmsNormBackward(Host(dout, {rows, dim}), Host(x, {rows, dim}),
                                   Host(weight, {dim}), Host(expected_rstd, {rows}),
                                   Host(expected_dx, {rows, dim}), Write::kOverwrite,
                                   Host(expected_dweight, {dim}), Write::kAccumulate, Tensor{},
                                   cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(rstd), expected_rstd, 0.0, 1e-5));  // fp32 throughout
  EXPECT_TRUE(AllClose(Download(out), expected_out, 1e-4, kBf16Relative));
  // dx subtracts a projection term, so cancellation calls for an absolute term at the scale
  // of the gradient (its values are around 1).
  EXPECT_TRUE(AllClose(Download(dx), expected_dx, 2e-2, kBf16Relative));
  // fp32 sums of 600 products against the CPU's double sums.
  EXPECT_TRUE(AllClose(Download(dweight), expected_dweight, 1e-3, 1e-4));

  // Deterministic weight gradient: the same accumulation again gives the same bits.
  const std::vector<float> once = Download(dweight);
  Tensor again = Upload(dweight_start, DType::kF32, {dim});
  ASSERT_TRUE(gpu()
                  .RmsNormBackward(device_dout, device_x, device_weight, rstd, dx,
                                   Write::kOverwrite, again, Write::kAccumulate, Tensor{},
                                   gpu_stream())
                  .ok());
  EXPECT_EQ(std::memcmp(once.data(), Download(again).data(), dim * sizeof(float)), 0);

  // Into the residual stream's gradient: dx starts as a bf16 residual gradient and ends as it
  // plus the norm's input gradient, summed in fp32 and rounded once (the CPU adds in fp32).
  const std::vector<float> residual = RoundedToBf16(RandomValues(random_, rows * dim));
  Tensor summed = Upload(residual, DType::kBF16, {rows, dim});
  Tensor dweight_summed = Upload(dweight_start, DType::kF32, {dim});
  ASSERT_TRUE(gpu()
                  .RmsNormBackward(device_dout, device_x, device_weight, rstd, summed,
                                   Write::kAccumulate, dweight_summed, Write::kAccumulate, Tensor{},
                                   gpu_stream())
                  .ok());
  std::vector<float> expected_summed = residual;
  std::vector<float> unused_dweight = dweight_start;
  ASSERT_TRUE(cpu_ops()
                  .RmsNormBackward(Host(dout, {rows, dim}), Host(x, {rows, dim}),
                                   Host(weight, {dim}), Host(expected_rstd, {rows}),
                                   Host(expected_summed, {rows, dim}), Write::kAccumulate,
                                   Host(unused_dweight, {dim}), Write::kAccumulate, Tensor{},
                                   cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(summed), expected_summed, 2e-2, kBf16Relative));
  // The weight gradient does not depend on where dx goes: the same bits.
  EXPECT_EQ(std::memcmp(once.data(), Download(dweight_summed).data(), dim * sizeof(float)), 0);

  // An overwritten weight gradient starts from a poisoned buffer and ends as the accumulated
  // one less its starting values: the same sums, so within one rounding of them.
  Tensor fresh = Poisoned(DType::kF32, {dim});
  ASSERT_TRUE(gpu()
                  .RmsNormBackward(device_dout, device_x, device_weight, rstd, dx,
                                   Write::kOverwrite, fresh, Write::kOverwrite, Tensor{},
                                   gpu_stream())
                  .ok());
  std::vector<float> expected_fresh(dim, 12345.0f);
  ASSERT_TRUE(cpu_ops()
                  .RmsNormBackward(Host(dout, {rows, dim}), Host(x, {rows, dim}),
                                   Host(weight, {dim}), Host(expected_rstd, {rows}),
                                   Host(expected_dx, {rows, dim}), Write::kOverwrite,
                                   Host(expected_fresh, {dim}), Write::kOverwrite, Tensor{},
                                   cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(fresh), expected_fresh, 1e-3, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaRmsNormTest,
                         ::testing::Values(200, 2048, 2736, 768, 36, 8200));

TEST_F(CudaPointwiseTest, EmbeddingForwardAndDeterministicBackward) {
  const int64_t vocab = 50, dim = 70, tokens = 513;
  std::vector<float> weight = RoundedToBf16(RandomValues(random_, vocab * dim));
  std::vector<int32_t> ids(tokens);
  std::uniform_int_distribution<int32_t> pick(0, 9);  // few distinct ids: many repeats
  for (int32_t& id : ids) id = pick(random_) * 5;
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, tokens * dim));
  std::vector<float> dweight_start = RandomValues(random_, vocab * dim);

  Tensor device_weight = Upload(weight, DType::kBF16, {vocab, dim});
  Tensor device_ids = UploadIds(ids, {tokens});
  Tensor out = Poisoned(DType::kBF16, {tokens, dim});
  ASSERT_TRUE(gpu().EmbeddingForward(device_weight, device_ids, out, gpu_stream()).ok());
  std::vector<float> expected_out(tokens * dim);
  ASSERT_TRUE(cpu_ops()
                  .EmbeddingForward(Host(weight, {vocab, dim}), HostIds(ids, {tokens}),
                                    Host(expected_out, {tokens, dim}), cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(out), expected_out, 0.0, 0.0));  // a copy

  Tensor device_dout = Upload(dout, DType::kBF16, {tokens, dim});
  Tensor dweight = Upload(dweight_start, DType::kF32, {vocab, dim});
  ASSERT_TRUE(gpu().EmbeddingBackward(device_dout, device_ids, dweight, gpu_stream()).ok());
  std::vector<float> expected_dweight = dweight_start;
  ASSERT_TRUE(cpu_ops()
                  .EmbeddingBackward(Host(dout, {tokens, dim}), HostIds(ids, {tokens}),
                                     Host(expected_dweight, {vocab, dim}), cpu_stream())
                  .ok());
  // fp32 sums of ~50 values each, in another association than the CPU's running sum.
  const std::vector<float> once = Download(dweight);
  EXPECT_TRUE(AllClose(once, expected_dweight, 1e-5, 1e-5));
  Tensor again = Upload(dweight_start, DType::kF32, {vocab, dim});
  ASSERT_TRUE(gpu().EmbeddingBackward(device_dout, device_ids, again, gpu_stream()).ok());
  EXPECT_EQ(std::memcmp(once.data(), Download(again).data(), once.size() * sizeof(float)), 0);
}

TEST_F(CudaPointwiseTest, AdamWMatchesThePyTorchFormulaOfTheCpu) {
  // 25000 vectors of four through the vector kernel and a tail of three through the scalar one.
  const int64_t count = 100003;
  std::vector<float> param = RandomValues(random_, count);
  std::vector<float> grad = RandomValues(random_, count, 0.1f);
  std::vector<float> exp_avg = RandomValues(random_, count, 0.01f);
  std::vector<float> exp_avg_sq = RandomValues(random_, count, 0.001f);
  for (float& v : exp_avg_sq) v = std::fabs(v);
  Tensor device_param = Upload(param, DType::kF32, {count});
  Tensor device_grad = Upload(grad, DType::kF32, {count});
  Tensor device_avg = Upload(exp_avg, DType::kF32, {count});
  Tensor device_avg_sq = Upload(exp_avg_sq, DType::kF32, {count});
  AdamWParams params;
  params.lr = 1e-3;
  params.weight_decay = 0.1;
  params.step = 7;
  ASSERT_TRUE(
      gpu().AdamW(device_param, device_grad, device_avg, device_avg_sq, params, gpu_stream()).ok());
  ASSERT_TRUE(cpu_ops()
                  .AdamW(Host(param, {count}), Host(grad, {count}), Host(exp_avg, {count}),
                         Host(exp_avg_sq, {count}), params, cpu_stream())
                  .ok());
  // Same fp32 operations in the same order without fused multiply-adds: equal up to the odd
  // ulp where a compiler still reassociates.
  EXPECT_TRUE(AllClose(Download(device_param), param, 0.0, 1e-6));
  EXPECT_TRUE(AllClose(Download(device_avg), exp_avg, 0.0, 1e-6));
  EXPECT_TRUE(AllClose(Download(device_avg_sq), exp_avg_sq, 0.0, 1e-6));

  params.step = 0;
  EXPECT_EQ(gpu()
                .AdamW(device_param, device_grad, device_avg, device_avg_sq, params, gpu_stream())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// AdamW's four fp32 shards of `count` elements plus one (for views one float off alignment):
// parameters, gradients and moments of typical sizes, the second moment non-negative.

// The optimizer in backward's single pass: the same update as AdamW and the same sum of the
// gradient's squares as SumOfSquares, to the bit, in the fused kernel (16-byte aligned shards:
// vectors, then a tail of three) and in its two-pass fallback (shards one float off alignment).
// 100,003 elements end in a partly filled block; 6,144,003 make 1,500 block partials, more than
// the finishing block's 1,024 threads.
TEST_F(CudaPointwiseTest, AdamWWithGradSquareSumEqualsAdamWAndSumOfSquaresToTheBit) {
  for (const int64_t count : {int64_t{100003}, int64_t{6144003}}) {
    SCOPED_TRACE(count);
    const auto [param, grad, exp_avg, exp_avg_sq] = RandomAdamWInputs(random_, count);
    AdamWParams params;
    params.lr = 1e-3;
    params.weight_decay = 0.1;
    params.step = 3;
    for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
      SCOPED_TRACE(offset);
      // Two copies of every shard on the device, `offset` floats into their buffers.
      auto shard = [&](const std::vector<float>& values) {
        const Tensor whole = Upload(values, DType::kF32, {count + 1});
        return Tensor{static_cast<char*>(whole.data) + 4 * offset, DType::kF32, {count}};
      };
      const Tensor fused_param = shard(param), fused_grad = shard(grad);
      const Tensor fused_avg = shard(exp_avg), fused_avg_sq = shard(exp_avg_sq);
      const Tensor plain_param = shard(param), plain_grad = shard(grad);
      const Tensor plain_avg = shard(exp_avg), plain_avg_sq = shard(exp_avg_sq);
      Tensor fused_sum = Poisoned(DType::kF32, {1});
      Tensor plain_sum = Poisoned(DType::kF32, {1});
      ASSERT_TRUE(gpu()
                      .AdamWWithGradSquareSum(fused_param, fused_grad, fused_avg, fused_avg_sq,
                                              params, fused_sum, gpu_stream())
                      .ok());
      ASSERT_TRUE(gpu().SumOfSquares(plain_grad, plain_sum, gpu_stream()).ok());
      ASSERT_TRUE(
          gpu().AdamW(plain_param, plain_grad, plain_avg, plain_avg_sq, params, gpu_stream()).ok());
      for (const auto& [fused, plain] : {std::pair<Tensor, Tensor>{fused_param, plain_param},
                                         {fused_avg, plain_avg},
                                         {fused_avg_sq, plain_avg_sq},
                                         {fused_sum, plain_sum}}) {
        const std::vector<float> a = Download(fused), b = Download(plain);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
      }
      // And the sum against the CPU's double sum: fp32 partial sums, a few ulps each.
      std::vector<float> expected(1);
      std::vector<float> host_grad(grad.begin() + offset, grad.begin() + offset + count);
      ASSERT_TRUE(
          cpu_ops().SumOfSquares(Host(host_grad, {count}), Host(expected, {1}), cpu_stream()).ok());
      EXPECT_TRUE(AllClose(Download(fused_sum), expected, 0.0, 1e-5));
    }
  }
}

// AdamW over a master split in halves (kernels/split_master.h): joined, the halves hold the
// very bits the fp32 kernel leaves in a plain master, the moments and the sum of squares are
// the same to the bit, and the high half is the split of each value. Aligned halves take the
// vector kernel (with a tail of three); halves one element off 8-byte alignment take the
// element kernel. Ties the split rounds toward zero are planted.
TEST_F(CudaPointwiseTest, AdamWSplitMasterEqualsTheFp32MasterToTheBit) {
  const int64_t count = 100003;
  auto [param, grad, exp_avg, exp_avg_sq] = RandomAdamWInputs(random_, count);
  for (int64_t i = 0; i < count; i += 977) param[i] = JoinFloat(0x3c01u, 0x8000u);
  AdamWParams params;
  params.lr = 1e-3;
  params.weight_decay = 0.1;
  params.step = 5;
  for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
    for (const bool with_sum : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "offset " << offset << ", sum " << with_sum);
      auto shard = [&](const std::vector<float>& values) {
        const Tensor whole = Upload(values, DType::kF32, {count + 1});
        return Tensor{static_cast<char*>(whole.data) + 4 * offset, DType::kF32, {count}};
      };
      std::vector<uint16_t> high_bits(count + 1), low_bits(count + 1);
      for (int64_t i = 0; i <= count; ++i) {
        const SplitHalves halves = SplitFloat(param[i]);
        high_bits[i] = halves.high;
        low_bits[i] = halves.low;
      }
      auto halves = [&](const std::vector<uint16_t>& bits) {
        const Tensor whole = NewDevice(DType::kBF16, {count + 1});
        EXPECT_TRUE(cuda_->CopyToDevice(bits.data(), whole, gpu_stream()).ok());
        return Tensor{static_cast<char*>(whole.data) + 2 * offset, DType::kBF16, {count}};
      };
      const Tensor high = halves(high_bits), low = halves(low_bits);
      const Tensor split_grad = shard(grad), split_avg = shard(exp_avg);
      const Tensor split_avg_sq = shard(exp_avg_sq);
      const Tensor plain_param = shard(param), plain_grad = shard(grad);
      const Tensor plain_avg = shard(exp_avg), plain_avg_sq = shard(exp_avg_sq);
      Tensor split_sum = Poisoned(DType::kF32, {1});
      Tensor plain_sum = Poisoned(DType::kF32, {1});
      ASSERT_TRUE(gpu()
                      .AdamWSplitMaster(high, low, split_grad, split_avg, split_avg_sq, params,
                                        with_sum ? split_sum : Tensor{}, gpu_stream())
                      .ok());
      ASSERT_TRUE(gpu()
                      .AdamWWithGradSquareSum(plain_param, plain_grad, plain_avg, plain_avg_sq,
                                              params, plain_sum, gpu_stream())
                      .ok());
      std::vector<uint16_t> new_high(count), new_low(count);
      ASSERT_TRUE(cuda_->CopyToHost(high, new_high.data(), gpu_stream()).ok());
      ASSERT_TRUE(cuda_->CopyToHost(low, new_low.data(), gpu_stream()).ok());
      const std::vector<float> expected = Download(plain_param);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < count; ++i) {
        const SplitHalves want = SplitFloat(expected[i]);
        if (new_high[i] != want.high || new_low[i] != want.low) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << "elements whose halves differ from the fp32 kernel's value";
      for (const auto& [split, plain] :
           {std::pair<Tensor, Tensor>{split_avg, plain_avg}, {split_avg_sq, plain_avg_sq}}) {
        const std::vector<float> a = Download(split), b = Download(plain);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
      }
      const std::vector<float> sum = Download(split_sum);
      if (with_sum) {
        EXPECT_EQ(std::memcmp(sum.data(), Download(plain_sum).data(), sizeof(float)), 0);
      } else {
        EXPECT_TRUE(std::isnan(sum[0])) << "no sum asked for, none written";
      }
    }
  }
}

TEST_F(CudaPointwiseTest, WrongDtypesAreRejectedWithTheArgumentNamed) {
  Tensor x = NewDevice(DType::kF32, {4, 8});
  Tensor weight = NewDevice(DType::kBF16, {8});
  Tensor out = NewDevice(DType::kBF16, {4, 8});
  Tensor rstd = NewDevice(DType::kF32, {4});
  absl::Status status = gpu().RmsNormForward(x, weight, 1e-6, out, rstd, Tensor{}, gpu_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("x must be bf16"), std::string::npos) << status;
  // A stream of another backend is refused rather than misused.
  status = gpu().Fill(out, 1.0f, cpu_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

}  // namespace
}  // namespace fsdpd::testing
