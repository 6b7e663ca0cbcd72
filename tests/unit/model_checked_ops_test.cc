// CheckedOps, the one check of the ops contract in front of every backend's ops: each
// violation (absent data, shapes that do not fit, dtypes the contract fixes, scalar arguments,
// outputs overlapping inputs) is rejected as INVALID_ARGUMENT naming the op and the argument,
// before the backend runs; the in-place forms the contract allows still run.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/backend/checked_ops.h"
#include "worker/backend/cpu_backend.h"
#include "worker/backend/op_arguments.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

class CheckedOpsTest : public ::testing::Test {
 protected:
  // A fresh f32 tensor of this shape, filled with `value`.
  Tensor Floats(std::vector<int64_t> shape, float value = 0.5f) {
    Tensor tensor{nullptr, DType::kF32, std::move(shape)};
    storage_.emplace_back(static_cast<size_t>(tensor.numel() + 1), value);
    tensor.data = storage_.back().data();
    return tensor;
  }
  // A view of `shape` starting `offset` floats into `base`'s storage.
  static Tensor ViewInto(const Tensor& base, int64_t offset, std::vector<int64_t> shape,
                         DType dtype = DType::kF32) {
    return Tensor{base.as<float>() + offset, dtype, std::move(shape)};
  }
  Tensor Ids(std::vector<int32_t> values) {
    const auto count = static_cast<int64_t>(values.size());
    ids_.push_back(std::move(values));
    return Tensor{ids_.back().data(), DType::kI32, {count}};
  }
  Ops& ops() { return backend_.ops(); }
  Stream& stream() { return backend_.compute_stream(); }

  CpuBackend backend_;
  std::vector<std::vector<float>> storage_;
  std::vector<std::vector<int32_t>> ids_;
};

void ExpectInvalid(const absl::Status& status, const std::vector<std::string>& fragments) {
  ASSERT_FALSE(status.ok()) << "expected a rejection mentioning " << fragments.front();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
  }
}

TEST_F(CheckedOpsTest, TheBackendHandsOutCheckedOps) {
  EXPECT_NE(dynamic_cast<CheckedOps*>(&ops()), nullptr);
}

TEST_F(CheckedOpsTest, AbsentAndNegativeTensorsAreRejected) {
  ExpectInvalid(
      ops().SiluForward(Tensor{nullptr, DType::kF32, {4}}, Floats({4}), Tensor{}, stream()),
      {"SiluForward", "x has no data"});
  Tensor negative = Floats({4});
  negative.shape = {-4};
  ExpectInvalid(ops().Fill(negative, 1.0f, stream()), {"Fill", "x has a negative dimension"});
}

TEST_F(CheckedOpsTest, ShapesThatDoNotFitAreRejected) {
  ExpectInvalid(
      ops().LinearForward(Floats({4, 5}), Floats({3, 6}), Tensor{}, Floats({4, 3}), stream()),
      {"LinearForward", "x must hold 4 rows of 6"});
  ExpectInvalid(ops().LinearBackward(Floats({4, 3}), Floats({4, 6}), Floats({3, 6}), Floats({4, 5}),
                                     Tensor{}, Tensor{}, Write::kAccumulate, stream()),
                {"LinearBackward", "dx must hold 4 rows of 6"});
  ExpectInvalid(ops().RmsNormForward(Floats({3, 4}), Floats({5}), 1e-6, Floats({3, 4}), Floats({3}),
                                     Tensor{}, stream()),
                {"RmsNormForward", "weight must be f32[4]"});
  ExpectInvalid(ops().RmsNormBackward(Floats({3, 4}), Floats({3, 4}), Floats({4}), Floats({2}),
                                      Floats({3, 4}), Write::kOverwrite, Floats({4}),
                                      Write::kAccumulate, Tensor{}, stream()),
                {"RmsNormBackward", "rstd must have one value per row of x (3)"});
  ExpectInvalid(ops().AttentionForward(Floats({2, 3, 12}), 3, 3, false, Floats({2, 3, 4}),
                                       Floats({2, 3, 3}), stream()),
                {"AttentionForward", "qkv must be [batch, seq, (heads + 2·kv_heads)·head_dim]"});
  ExpectInvalid(
      ops().AttentionBackward(Floats({2, 3, 5}), Floats({2, 3, 12}), Floats({2, 3, 4}),
                              Floats({2, 2, 3}), 2, 2, false, Floats({2, 3, 12}), stream()),
      {"AttentionBackward", "dout must be f32[2, 3, 4]"});
  ExpectInvalid(ops().EmbeddingForward(Floats({5, 2}), Ids({0, 1, 2}), Floats({3, 3}), stream()),
                {"EmbeddingForward", "out must hold 3 rows of 2"});
  ExpectInvalid(ops().Add(Floats({4}), Floats({5}), Floats({4}), stream()),
                {"Add", "b f32[5] must have as many elements as a f32[4]"});
  ExpectInvalid(ops().Cast(Floats({4}), Floats({3}), stream()), {"Cast", "dst"});
  ExpectInvalid(
      ops().AdamW(Floats({4}), Floats({4}), Floats({3}), Floats({4}), AdamWParams{}, stream()),
      {"AdamW", "exp_avg f32[3] must have as many elements as param"});
}

TEST_F(CheckedOpsTest, DtypesTheContractFixesAreChecked) {
  ExpectInvalid(ops().EmbeddingForward(Floats({5, 2}), Floats({3}), Floats({3, 2}), stream()),
                {"EmbeddingForward", "tokens must be i32"});
  Tensor ids = Ids({0});
  ExpectInvalid(ops().SumOfSquares(Floats({4}), ids, stream()),
                {"SumOfSquares", "result must be f32"});
  ExpectInvalid(ops().Fill(ids, 1.0f, stream()), {"Fill", "x must be f32 or bf16"});
  ExpectInvalid(ops().SumOfSquares(Floats({4}), Floats({2}), stream()),
                {"SumOfSquares", "result must be a single value"});
}

TEST_F(CheckedOpsTest, ScalarArgumentsAreChecked) {
  ExpectInvalid(ops().RmsNormForward(Floats({3, 4}), Floats({4}), -1.0, Floats({3, 4}), Floats({3}),
                                     Tensor{}, stream()),
                {"RmsNormForward", "eps must be >= 0"});
  AdamWParams params;
  params.step = 0;
  ExpectInvalid(ops().AdamW(Floats({4}), Floats({4}), Floats({4}), Floats({4}), params, stream()),
                {"AdamW", "step must be >= 1"});
  params = AdamWParams{};
  params.beta2 = 1.0;
  ExpectInvalid(ops().AdamW(Floats({4}), Floats({4}), Floats({4}), Floats({4}), params, stream()),
                {"AdamW", "betas must lie in [0, 1)"});
  Tensor no_targets = Ids({0});
  no_targets.shape = {0};
  ExpectInvalid(ops().HeadCrossEntropy(Floats({0, 3}), Floats({4, 3}), no_targets, 1.0, Floats({1}),
                                       Tensor{}, Tensor{}, stream()),
                {"HeadCrossEntropy", "zero tokens"});
}

TEST_F(CheckedOpsTest, OutputsOverlappingInputsAreRejectedAndNothingIsWritten) {
  // out written over x: the product would read rows it has already overwritten.
  Tensor x = Floats({4, 4}, 1.0f);
  Tensor weight = Floats({4, 4}, 1.0f);
  ExpectInvalid(ops().LinearForward(x, weight, Tensor{}, x, stream()),
                {"LinearForward", "out f32[4, 4] overlaps x f32[4, 4]"});
  EXPECT_EQ(x.as<float>()[0], 1.0f);
  // An output that starts inside an input.
  Tensor big = Floats({16}, 2.0f);
  ExpectInvalid(ops().RmsNormForward(ViewInto(big, 0, {2, 4}), Floats({4}), 1e-6,
                                     ViewInto(big, 4, {2, 4}), Floats({2}), Tensor{}, stream()),
                {"RmsNormForward", "out", "overlaps x"});
  // Two outputs sharing memory.
  Tensor grads = Floats({8});
  ExpectInvalid(ops().LinearBackward(Floats({2, 2}), Floats({2, 2}), Floats({2, 2}),
                                     ViewInto(grads, 0, {2, 2}), ViewInto(grads, 2, {2, 2}),
                                     Tensor{}, Write::kAccumulate, stream()),
                {"LinearBackward", "dx", "overlaps dweight"});
  Tensor param = Floats({4});
  ExpectInvalid(ops().AdamW(param, param, Floats({4}), Floats({4}), AdamWParams{}, stream()),
                {"AdamW", "param f32[4] overlaps grad f32[4]"});
  // The fused optimizer step checks its sum's tensor, then the shards as AdamW does.
  Tensor shard = Floats({4});
  ExpectInvalid(ops().AdamWWithGradSquareSum(Floats({4}), shard, Floats({4}), Floats({4}),
                                             AdamWParams{}, ViewInto(shard, 3, {1}), stream()),
                {"AdamWWithGradSquareSum", "grad_square_sum", "overlaps grad"});
  ExpectInvalid(ops().AdamWWithGradSquareSum(Floats({4}), Floats({4}), Floats({4}), Floats({4}),
                                             AdamWParams{}, Floats({2}), stream()),
                {"AdamWWithGradSquareSum", "grad_square_sum"});
  ExpectInvalid(ops().AdamWWithGradSquareSum(Floats({4}), Floats({4}), Floats({3}), Floats({4}),
                                             AdamWParams{}, Floats({1}), stream()),
                {"AdamW", "exp_avg"});
  Tensor qkv = Floats({1, 2, 6});
  ExpectInvalid(ops().AttentionForward(qkv, 1, 1, false, ViewInto(qkv, 0, {1, 2, 2}),
                                       Floats({1, 1, 2}), stream()),
                {"AttentionForward", "out", "overlaps qkv"});
  Tensor values = Floats({4});
  ExpectInvalid(ops().SumOfSquares(values, ViewInto(values, 3, {1}), stream()),
                {"SumOfSquares", "result", "overlaps x"});
}

TEST_F(CheckedOpsTest, ElementWiseOpsRunInPlaceButNotOnPartialOverlaps) {
  Tensor a = Floats({4}, 1.0f);
  Tensor b = Floats({4}, 2.0f);
  ASSERT_TRUE(ops().Add(a, b, a, stream()).ok());
  EXPECT_EQ(a.as<float>()[3], 3.0f);
  Tensor shifted = Floats({5}, 1.0f);
  ExpectInvalid(ops().Add(ViewInto(shifted, 0, {4}), b, ViewInto(shifted, 1, {4}), stream()),
                {"Add", "out", "partly overlaps a"});
  Tensor x = Floats({4}, 0.0f);
  ASSERT_TRUE(ops().SiluForward(x, x, Tensor{}, stream()).ok());
  EXPECT_EQ(x.as<float>()[0], 0.0f);
  ASSERT_TRUE(ops().SiluBackward(b, x, b, Tensor{}, Tensor{}, Tensor{}, stream()).ok());
  // silu's output written beside the gradient must not overlap any other tensor.
  ExpectInvalid(ops().SiluBackward(b, x, b, x, Tensor{}, Tensor{}, stream()),
                {"SiluBackward", "out", "overlaps x"});
  ExpectInvalid(ops().SiluBackward(b, x, Floats({4}, 0.0f), b, Tensor{}, Tensor{}, stream()),
                {"SiluBackward", "out", "overlaps dout"});
  ExpectInvalid(ops().SiluBackward(b, x, b, Floats({3}, 0.0f), Tensor{}, Tensor{}, stream()),
                {"SiluBackward", "out"});
  // A same-dtype copy may be in place; a conversion, which changes element sizes, may not.
  ASSERT_TRUE(ops().Cast(a, a, stream()).ok());
  ExpectInvalid(ops().Cast(a, ViewInto(a, 0, {4}, DType::kBF16), stream()),
                {"Cast", "dst bf16[4] overlaps src f32[4]"});
}

TEST(OpArgumentsTest, OverlapsIsExactAboutByteRanges) {
  std::vector<float> storage(8);
  const Tensor first{storage.data(), DType::kF32, {4}};
  const Tensor second{storage.data() + 4, DType::kF32, {4}};
  const Tensor straddling{storage.data() + 3, DType::kF32, {2}};
  const Tensor empty{storage.data(), DType::kF32, {0}};
  EXPECT_FALSE(Overlaps(first, second));
  EXPECT_TRUE(Overlaps(first, straddling));
  EXPECT_TRUE(Overlaps(second, straddling));
  EXPECT_FALSE(Overlaps(first, empty));
  EXPECT_FALSE(Overlaps(first, Tensor{}));
}

}  // namespace
// The amax an op leaves for an FP8 product (Fp8OperandAmax): one f32 value apart from every
// other tensor of the call, and only where the op writes the output it measures.
TEST_F(CheckedOpsTest, AmaxTensorsAreOneFloatApartFromTheRest) {
  Tensor x = Floats({4, 16}), weight = Floats({16}), out = Floats({4, 16}), rstd = Floats({4});
  ExpectInvalid(ops().RmsNormForward(x, weight, 1e-6, out, rstd, Floats({2}), stream()),
                {"RmsNormForward", "out_amax", "single value"});
  ExpectInvalid(ops().RmsNormForward(x, weight, 1e-6, out, rstd, ViewInto(out, 3, {1}), stream()),
                {"RmsNormForward", "out_amax", "overlaps out"});
  Tensor amax = Floats({1}, 0.0f);
  ExpectInvalid(ops().RmsNormForward(x, weight, 1e-6, out, rstd,
                                     ViewInto(amax, 0, {1}, DType::kBF16), stream()),
                {"RmsNormForward", "out_amax"});
  ExpectInvalid(
      ops().RmsNormBackward(x, Floats({4, 16}), weight, rstd, out, Write::kAccumulate, Floats({16}),
                            Write::kOverwrite, ViewInto(out, 0, {1}), stream()),
      {"RmsNormBackward", "dx_amax", "overlaps dx"});
  ExpectInvalid(ops().SiluBackward(x, x, out, Tensor{}, Tensor{}, amax, stream()),
                {"SiluBackward", "out_amax needs out"});
  ExpectInvalid(ops().SiluBackward(x, Floats({4, 16}), out, Floats({4, 16}), amax, amax, stream()),
                {"SiluBackward", "dx_amax", "overlaps out_amax"});
  // FP8 products take rows, in and out features in multiples of 16.
  Tensor rows = Floats({16, 16}), w = Floats({16, 16}), product = Floats({16, 16});
  ExpectInvalid(ops().Fp8LinearForward(rows, w, Tensor{}, product, {amax, Floats({1})}, stream()),
                {"Fp8LinearForward", "no dout amax"});
  ExpectInvalid(ops().Fp8LinearBackward(product, rows, w, Tensor{}, Floats({16, 16}), Tensor{},
                                        Write::kOverwrite, {Tensor{}, Floats({1, 2})}, stream()),
                {"Fp8LinearBackward", "dout amax", "single value"});
  Tensor dx = Floats({16, 16});
  ExpectInvalid(ops().Fp8LinearBackward(product, rows, w, dx, Tensor{}, Tensor{}, Write::kOverwrite,
                                        {ViewInto(dx, 5, {1})}, stream()),
                {"Fp8LinearBackward", "dx", "overlaps x amax"});
}

// A producer raises its amax to max |output| and never lowers it: several producers may share
// one, and a value left above it stays (the model zeroes the slots first).
TEST_F(CheckedOpsTest, ProducersRaiseTheirAmax) {
  Tensor x = Floats({2, 16}), weight = Floats({16}, 1.0f), out = Floats({2, 16});
  for (int i = 0; i < 32; ++i) x.as<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  x.as<float>()[21] = -3.0f;  // the largest |value|, negative
  Tensor amax = Floats({1}, 0.0f);
  ASSERT_TRUE(ops().RmsNormForward(x, weight, 1e-6, out, Floats({2}), amax, stream()).ok());
  float expected = 0.0f;
  for (int i = 0; i < 32; ++i) expected = std::max(expected, std::fabs(out.as<float>()[i]));
  EXPECT_GT(expected, 0.0f);
  EXPECT_EQ(amax.as<float>()[0], expected);
  amax.as<float>()[0] = 100.0f;
  ASSERT_TRUE(ops().RmsNormForward(x, weight, 1e-6, out, Floats({2}), amax, stream()).ok());
  EXPECT_EQ(amax.as<float>()[0], 100.0f);

  // The backward's amax is of dx as stored: with kAccumulate, of the sum.
  Tensor rstd = Floats({2}), residual = Floats({2, 16}, 7.0f), residual_amax = Floats({1}, 0.0f);
  ASSERT_TRUE(ops().RmsNormForward(x, weight, 1e-6, out, rstd, Tensor{}, stream()).ok());
  ASSERT_TRUE(ops()
                  .RmsNormBackward(Floats({2, 16}, 0.01f), x, weight, rstd, residual,
                                   Write::kAccumulate, Floats({16}), Write::kOverwrite,
                                   residual_amax, stream())
                  .ok());
  float residual_max = 0.0f;
  for (int i = 0; i < 32; ++i)
    residual_max = std::max(residual_max, std::fabs(residual.as<float>()[i]));
  EXPECT_GT(residual_max, 6.9f);
  EXPECT_EQ(residual_amax.as<float>()[0], residual_max);

  Tensor silu = Floats({2, 16}), dx = Floats({2, 16}), dout = Floats({2, 16}, -2.0f);
  Tensor silu_amax = Floats({1}, 0.0f), dx_amax = Floats({1}, 0.0f), out_amax = Floats({1}, 0.0f);
  ASSERT_TRUE(ops().SiluForward(x, silu, silu_amax, stream()).ok());
  ASSERT_TRUE(ops().SiluBackward(dout, x, dx, out, dx_amax, out_amax, stream()).ok());
  float silu_max = 0.0f, dx_max = 0.0f;
  for (int i = 0; i < 32; ++i) {
    silu_max = std::max(silu_max, std::fabs(silu.as<float>()[i]));
    dx_max = std::max(dx_max, std::fabs(dx.as<float>()[i]));
  }
  EXPECT_EQ(silu_amax.as<float>()[0], silu_max);
  EXPECT_EQ(out_amax.as<float>()[0], silu_max);  // the same silu, recomputed
  EXPECT_EQ(dx_amax.as<float>()[0], dx_max);
  EXPECT_NE(dx_max, silu_max);

  // A NaN wins, as on the device.
  x.as<float>()[5] = std::nanf("");
  ASSERT_TRUE(ops().SiluForward(x, silu, silu_amax, stream()).ok());
  EXPECT_TRUE(std::isnan(silu_amax.as<float>()[0]));
}

// An FP8 product scales with the amax it is given: the exact one changes no bit, one three times
// larger (another grid of steps: a power of two would only shift exponents) changes the product.
TEST_F(CheckedOpsTest, Fp8ProductsScaleWithTheGivenAmax) {
  Tensor x = Floats({16, 16}), w = Floats({16, 16});
  for (int i = 0; i < 256; ++i) {
    x.as<float>()[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;
    w.as<float>()[i] = 0.02f * static_cast<float>((i * 11) % 53) - 0.5f;
  }
  float exact = 0.0f;
  for (int i = 0; i < 256; ++i) exact = std::max(exact, std::fabs(x.as<float>()[i]));
  Tensor own = Floats({16, 16}), given = Floats({16, 16}), coarse = Floats({16, 16});
  ASSERT_TRUE(ops().Fp8LinearForward(x, w, Tensor{}, own, {}, stream()).ok());
  ASSERT_TRUE(ops().Fp8LinearForward(x, w, Tensor{}, given, {Floats({1}, exact)}, stream()).ok());
  ASSERT_TRUE(
      ops().Fp8LinearForward(x, w, Tensor{}, coarse, {Floats({1}, 3.0f * exact)}, stream()).ok());
  EXPECT_EQ(std::memcmp(own.data, given.data, 256 * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(own.data, coarse.data, 256 * sizeof(float)), 0);
}

}  // namespace fsdpd
