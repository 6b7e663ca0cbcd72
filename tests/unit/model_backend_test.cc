// The CPU backend: its tracking allocator, streams and events, copies, and the argument
// checks of its ops.
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu_backend.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

TEST(ModelCpuBackendTest, TracksCurrentAndPeakBytes) {
  CpuBackend backend;
  EXPECT_EQ(backend.name(), "cpu");
  EXPECT_EQ(backend.activation_dtype(), DType::kF32);
  EXPECT_EQ(backend.memory_stats().current_bytes, 0);
  auto first = backend.Allocate(1000);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->bytes(), 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*first)->data()) % 64, 0u);
  const int64_t after_first = backend.memory_stats().current_bytes;
  EXPECT_GE(after_first, 1000);
  {
    auto second = backend.Allocate(5000);
    ASSERT_TRUE(second.ok());
    std::memset((*second)->data(), 0, 5000);  // the whole range is usable
    EXPECT_GE(backend.memory_stats().current_bytes, after_first + 5000);
  }
  const MemoryStats stats = backend.memory_stats();
  EXPECT_EQ(stats.current_bytes, after_first);
  EXPECT_GE(stats.peak_bytes, after_first + 5000);
  backend.ResetPeakMemory();
  EXPECT_EQ(backend.memory_stats().peak_bytes, after_first);
  first->reset();
  EXPECT_EQ(backend.memory_stats().current_bytes, 0);
}

TEST(ModelCpuBackendTest, LimitGivesErrorWithSizes) {
  CpuBackend backend(CpuBackendConfig{1 << 20});
  auto held = backend.Allocate(600 << 10);
  ASSERT_TRUE(held.ok());
  auto refused = backend.Allocate(600 << 10);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(std::to_string(600 << 10)));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(std::to_string(1 << 20)));
  // The refused request is not counted, and memory freed can be reused.
  EXPECT_LT(backend.memory_stats().current_bytes, 1 << 20);
  held->reset();
  EXPECT_TRUE(backend.Allocate(600 << 10).ok());
  EXPECT_EQ(backend.Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelCpuBackendTest, BufferMayOutliveBackend) {
  std::unique_ptr<Buffer> buffer;
  {
    CpuBackend backend;
    auto allocated = backend.Allocate(128);
    ASSERT_TRUE(allocated.ok());
    buffer = std::move(*allocated);
  }
  std::memset(buffer->data(), 1, 128);
  buffer.reset();  // must not touch the destroyed backend
}

TEST(ModelCpuBackendTest, CopiesStreamsAndEvents) {
  CpuBackend backend;
  auto buffer = backend.Allocate(4 * sizeof(float));
  ASSERT_TRUE(buffer.ok());
  const Tensor device = (*buffer)->View(DType::kF32, {4});
  const std::vector<float> host = {1, 2, 3, 4};
  ASSERT_TRUE(backend.CopyToDevice(host.data(), device, backend.compute_stream()).ok());
  std::vector<float> back(4);
  ASSERT_TRUE(backend.CopyToHost(device, back.data(), backend.comm_stream()).ok());
  EXPECT_EQ(back, host);
  EXPECT_FALSE(backend.CopyToHost(device, nullptr, backend.compute_stream()).ok());
  auto event = backend.CreateEvent();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE((*event)->Record(backend.compute_stream()).ok());
  EXPECT_TRUE((*event)->WaitOn(backend.comm_stream()).ok());
  EXPECT_TRUE((*event)->Synchronize().ok());
  EXPECT_TRUE(backend.compute_stream().Synchronize().ok());
}

// Tensors on host vectors, for op argument checks.
class ModelCpuOpsTest : public ::testing::Test {
 protected:
  Tensor Floats(std::vector<int64_t> shape) {
    Tensor tensor{nullptr, DType::kF32, std::move(shape)};
    storage_.emplace_back(static_cast<size_t>(tensor.numel() + 1), 0.0f);
    tensor.data = storage_.back().data();
    return tensor;
  }
  Tensor Ids(std::vector<int32_t> values, std::vector<int64_t> shape) {
    ids_.push_back(std::move(values));
    return Tensor{ids_.back().data(), DType::kI32, std::move(shape)};
  }
  Ops& ops() { return backend_.ops(); }
  Stream& stream() { return backend_.compute_stream(); }

  CpuBackend backend_;
  std::vector<std::vector<float>> storage_;
  std::vector<std::vector<int32_t>> ids_;
};

void ExpectInvalid(const absl::Status& status, const std::vector<std::string>& fragments) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
  }
}

TEST_F(ModelCpuOpsTest, TensorDescribe) {
  EXPECT_EQ(Floats({8, 1024, 2048}).Describe(), "f32[8, 1024, 2048]");
  EXPECT_EQ((Tensor{nullptr, DType::kBF16, {3}}).Describe(), "bf16[3] (null)");
  EXPECT_STREQ(DTypeName(DType::kI32), "i32");
}

TEST_F(ModelCpuOpsTest, LinearShapeMismatchNamesTheTensors) {
  ExpectInvalid(
      ops().LinearForward(Floats({4, 5}), Floats({3, 6}), Tensor{}, Floats({4, 3}), stream()),
      {"LinearForward", "x", "f32[4, 5]", "f32[3, 6]"});
  ExpectInvalid(
      ops().LinearForward(Floats({4, 6}), Floats({3, 6}), Floats({4}), Floats({4, 3}), stream()),
      {"LinearForward", "bias", "f32[3]", "f32[4]"});
  ExpectInvalid(
      ops().LinearForward(Floats({4, 6}), Floats({3, 6}), Tensor{}, Floats({4, 4}), stream()),
      {"out", "f32[4, 4]"});
  ExpectInvalid(ops().LinearBackward(Floats({4, 2}), Floats({4, 6}), Floats({3, 6}), Floats({4, 6}),
                                     Floats({3, 6}), Tensor{}, Write::kAccumulate, stream()),
                {"LinearBackward", "dout", "f32[4, 2]"});
  EXPECT_TRUE(
      ops()
          .LinearForward(Floats({2, 2, 6}), Floats({3, 6}), Floats({3}), Floats({4, 3}), stream())
          .ok());
}

TEST_F(ModelCpuOpsTest, DTypeMismatch) {
  Tensor bf16 = Floats({4, 6});
  bf16.dtype = DType::kBF16;
  ExpectInvalid(ops().SiluForward(bf16, Floats({4, 6}), Tensor{}, stream()),
                {"SiluForward", "x must be f32", "bf16[4, 6]"});
  ExpectInvalid(ops().EmbeddingForward(Floats({5, 2}), Floats({3}), Floats({3, 2}), stream()),
                {"EmbeddingForward", "tokens must be i32"});
}

TEST_F(ModelCpuOpsTest, OutOfRangeIdsAreRejected) {
  ExpectInvalid(
      ops().EmbeddingForward(Floats({5, 2}), Ids({0, 5, 1}, {3}), Floats({3, 2}), stream()),
      {"tokens[1] = 5", "[0, 5)"});
  ExpectInvalid(ops().HeadCrossEntropy(Floats({2, 3}), Floats({4, 3}), Ids({1, -1}, {2}), 1.0,
                                       Floats({1}), Floats({2, 3}), Floats({4, 3}), stream()),
                {"targets[1] = -1"});
}

TEST_F(ModelCpuOpsTest, AttentionAndNormShapes) {
  ExpectInvalid(ops().AttentionForward(Floats({2, 3, 12}), 3, 3, false, Floats({2, 3, 4}),
                                       Floats({2, 3, 3}), stream()),
                {"qkv must be [batch, seq, (heads + 2·kv_heads)·head_dim]", "3 heads"});
  ExpectInvalid(ops().AttentionForward(Floats({2, 3, 12}), 3, 2, false, Floats({2, 3, 4}),
                                       Floats({2, 3, 3}), stream()),
                {"heads (3) and kv_heads (2)", "kv_heads dividing heads"});
  ExpectInvalid(ops().AttentionForward(Floats({2, 3, 12}), 2, 2, false, Floats({2, 3, 4}),
                                       Floats({2, 3, 2}), stream()),
                {"lse must be f32[2, 2, 3]", "f32[2, 3, 2]"});
  ExpectInvalid(ops().AttentionForward(Floats({6, 12}), 2, 2, false, Floats({2, 3, 4}),
                                       Floats({2, 2, 3}), stream()),
                {"qkv must be [batch, seq, (heads + 2·kv_heads)·head_dim]"});
  ExpectInvalid(ops().RmsNormForward(Floats({3, 4}), Floats({5}), 1e-6, Floats({3, 4}), Floats({3}),
                                     Tensor{}, stream()),
                {"RmsNormForward", "weight must be f32[4]", "f32[5]"});
  ExpectInvalid(ops().RmsNormForward(Floats({3, 4}), Floats({4}), 1e-6, Floats({3, 4}), Floats({2}),
                                     Tensor{}, stream()),
                {"rstd"});
}

TEST_F(ModelCpuOpsTest, MissingDataAndScalarOutputs) {
  ExpectInvalid(ops().Add(Tensor{nullptr, DType::kF32, {3}}, Floats({3}), Floats({3}), stream()),
                {"Add", "a has no data"});
  ExpectInvalid(ops().SumOfSquares(Floats({3}), Floats({2}), stream()),
                {"result must be a single value"});
  ExpectInvalid(
      ops().AdamW(Floats({3}), Floats({4}), Floats({3}), Floats({3}), AdamWParams{}, stream()),
      {"AdamW", "grad"});
  AdamWParams zero_step;
  zero_step.step = 0;
  ExpectInvalid(
      ops().AdamW(Floats({3}), Floats({3}), Floats({3}), Floats({3}), zero_step, stream()),
      {"step must be >= 1"});
  ExpectInvalid(ops().Cast(Floats({3}), Ids({1, 2, 3}, {3}), stream()), {"no conversion"});
}

TEST_F(ModelCpuOpsTest, CastFillScaleAndSumOfSquaresOnBf16) {
  Tensor source = Floats({3});
  source.as<float>()[0] = 1.0f;
  source.as<float>()[1] = -3.0f;
  source.as<float>()[2] = 1.00390625f;  // 1 + 2^-8: a tie that rounds to even (1.0)
  std::vector<uint16_t> packed(3);
  const Tensor bf16{packed.data(), DType::kBF16, {3}};
  ASSERT_TRUE(ops().Cast(source, bf16, stream()).ok());
  EXPECT_EQ(packed, (std::vector<uint16_t>{0x3f80, 0xc040, 0x3f80}));
  const Tensor sum = Floats({1});
  ASSERT_TRUE(ops().SumOfSquares(bf16, sum, stream()).ok());
  EXPECT_FLOAT_EQ(*sum.as<float>(), 11.0f);
  ASSERT_TRUE(ops().Scale(bf16, 2.0f, stream()).ok());
  ASSERT_TRUE(ops().Fill(source, 7.0f, stream()).ok());
  ASSERT_TRUE(ops().Cast(bf16, source, stream()).ok());
  EXPECT_EQ(std::vector<float>(source.as<float>(), source.as<float>() + 3),
            (std::vector<float>{2.0f, -6.0f, 2.0f}));
  source.as<float>()[0] = 1.00390625f;
  ASSERT_TRUE(ops().RoundToBf16(source, stream()).ok());
  EXPECT_EQ(source.as<float>()[0], 1.0f);
}

TEST_F(ModelCpuOpsTest, HeadCrossEntropyWritesLoss) {
  // Zero inputs give uniform logits: loss = log(vocab) whatever the targets.
  const Tensor loss = Floats({1});
  ASSERT_TRUE(ops()
                  .HeadCrossEntropy(Floats({2, 3}), Floats({4, 3}), Ids({1, 3}, {2}), 1.0, loss,
                                    Tensor{}, Tensor{}, stream())
                  .ok());
  EXPECT_NEAR(*loss.as<float>(), std::log(4.0f), 1e-6);
}

}  // namespace
}  // namespace fsdpd
