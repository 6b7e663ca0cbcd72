// The matvec chain probe (bench/edge_matvec_chain.h) on lavapipe with the validation layer: the
// chain run a dispatch a stage, and in one dispatch with grid-wide barriers (with and without
// the next stage's weights read before them), gives the double reference's output within fp32's
// bound, and the three orders give the same bits. The persistent orders run on one workgroup
// here: lavapipe need not run several at once (bench/edge_probes.h), and one workgroup still
// crosses every barrier and walks every row of every stage. Chains the shader cannot run are
// refused by name.
#include "bench/edge_matvec_chain.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "edge/vulkan_context.h"
#include "gtest/gtest.h"

namespace fsdpd::edge {
namespace {

std::unique_ptr<VulkanContext> ValidatedContext() {
  VulkanOptions options;
  options.validation = true;
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  EXPECT_TRUE(context.ok()) << "no usable Vulkan device (CI runs on lavapipe): "
                            << context.status();
  return context.ok() ? std::move(*context) : nullptr;
}

// Three stages of whole rounds for the device's subgroup (int8's round fits fp16's too): a
// widening stage, a narrowing one to an odd row count, and a short last one.
std::vector<ChainStage> TestStages(const VulkanContext& context) {
  const int64_t k = 64 * context.info().subgroup_size;
  return {{2 * k, k}, {k + 1, 2 * k}, {37, k}};
}

std::vector<float> TestInput(int64_t k) {
  std::vector<float> x(static_cast<size_t>(k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
  return x;
}

class EdgeMatvecChainTest : public ::testing::TestWithParam<bool> {};

TEST_P(EdgeMatvecChainTest, EveryOrderGivesTheReferenceAndTheSameBits) {
  const bool int8 = GetParam();
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  const MatvecChain chain = RandomMatvecChain(TestStages(*context), int8, 7);
  const std::vector<float> x = TestInput(chain.stages.front().k);
  const std::vector<double> reference = MatvecChainReference(chain, x);
  absl::StatusOr<std::unique_ptr<MatvecChainOnDevice>> device =
      MatvecChainOnDevice::Create(*context, chain);
  ASSERT_TRUE(device.ok()) << device.status();
  // fp32 sums of at most 2·64·lanes terms a stage, three stages of about unit gain: the
  // worst-case bound γ_K·Σ|w·x| (K·2^-24 of sums whose terms' magnitudes add to a few times
  // the output's scale) is under 1e-3 of the largest output here, and a wrong row, a stale
  // input or an unwritten (poisoned) output is of the output's own scale.
  double scale = 0.0;
  for (const double value : reference) scale = std::max(scale, std::abs(value));
  ASSERT_GT(scale, 0.1);
  std::vector<std::vector<float>> outputs;
  for (const ChainOrder order :
       {ChainOrder::kDispatchEach, ChainOrder::kPersistent, ChainOrder::kPersistentPrefetch}) {
    absl::StatusOr<std::vector<float>> out = (*device)->Run(x, order, 1);
    ASSERT_TRUE(out.ok()) << ChainOrderName(order) << ": " << out.status();
    ASSERT_EQ(out->size(), reference.size());
    for (size_t i = 0; i < reference.size(); ++i) {
      ASSERT_LE(std::abs((*out)[i] - reference[i]), 1e-3 * scale)
          << ChainOrderName(order) << ", output " << i << ": " << (*out)[i] << " against "
          << reference[i];
    }
    outputs.push_back(std::move(*out));
  }
  for (size_t o = 1; o < outputs.size(); ++o) {
    EXPECT_EQ(std::memcmp(outputs[o].data(), outputs[0].data(), outputs[0].size() * 4), 0)
        << "order " << o << " differs in its bits from a dispatch a stage";
  }
  absl::StatusOr<double> us = (*device)->Time(ChainOrder::kPersistentPrefetch, 1);
  ASSERT_TRUE(us.ok()) << us.status();
  EXPECT_GT(*us, 0.0);
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

INSTANTIATE_TEST_SUITE_P(Weights, EdgeMatvecChainTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("int8") : std::string("fp16");
                         });

TEST(EdgeMatvecChainCheckTest, RefusesChainsTheShaderCannotRun) {
  const auto check = [](std::vector<ChainStage> stages, bool int8, uint64_t max_buffer) {
    return CheckMatvecChain(RandomMatvecChain(std::move(stages), int8, 1), 32, max_buffer);
  };
  const uint64_t big = uint64_t{1} << 32;
  EXPECT_TRUE(check({{8, 1024}, {4, 8}}, false, big).code() == absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(check({{2048, 1024}, {8, 2048}}, false, big).ok());
  // int8 reads twice the weights a vector: a round of 2048 at 32 lanes.
  absl::Status round = check({{8, 1024}}, true, big);
  ASSERT_EQ(round.code(), absl::StatusCode::kInvalidArgument) << round;
  EXPECT_TRUE(absl::StrContains(round.message(), "a multiple of 2048")) << round;
  absl::Status wider = check({{1024, 1024}, {8, 2048}}, false, big);
  ASSERT_EQ(wider.code(), absl::StatusCode::kInvalidArgument) << wider;
  EXPECT_TRUE(absl::StrContains(wider.message(), "the stage before writes 1024")) << wider;
  absl::Status room = check({{1024, 1024}}, false, 1024 * 1024);
  ASSERT_EQ(room.code(), absl::StatusCode::kInvalidArgument) << room;
  EXPECT_TRUE(absl::StrContains(room.message(), "more than one buffer holds")) << room;
  EXPECT_EQ(check({}, false, big).code(), absl::StatusCode::kInvalidArgument);
  MatvecChain short_weights = RandomMatvecChain({{8, 1024}}, false, 1);
  short_weights.halves.pop_back();
  EXPECT_EQ(CheckMatvecChain(short_weights, 32, big).code(), absl::StatusCode::kInvalidArgument);
  MatvecChain short_scales = RandomMatvecChain({{8, 2048}}, true, 1);
  ASSERT_TRUE(CheckMatvecChain(short_scales, 32, big).ok());
  short_scales.row_scales.pop_back();
  EXPECT_EQ(CheckMatvecChain(short_scales, 32, big).code(), absl::StatusCode::kInvalidArgument);
}

TEST(EdgeMatvecChainCheckTest, RunRefusesAWrongInputAndNoWorkgroups) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  const MatvecChain chain = RandomMatvecChain(TestStages(*context), false, 3);
  absl::StatusOr<std::unique_ptr<MatvecChainOnDevice>> device =
      MatvecChainOnDevice::Create(*context, chain);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->Run(std::vector<float>(3), ChainOrder::kDispatchEach, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (*device)->Run(TestInput(chain.stages.front().k), ChainOrder::kPersistent, 0).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeMatvecChainCheckTest, DecodingStagesAreALayersFourProjections) {
  const std::vector<ChainStage> stages = DecodingStages(2048, 4, 12);
  ASSERT_EQ(stages.size(), 48u);
  EXPECT_EQ(stages[0].n, 6144);
  EXPECT_EQ(stages[1].n, 2048);
  EXPECT_EQ(stages[2].n, 8192);
  EXPECT_EQ(stages[3].k, 8192);
  EXPECT_EQ(stages[4].k, 2048);
  // The seed's width runs in int8 on NVIDIA's 32 lanes; 1024 is half of int8's round there.
  EXPECT_TRUE(CheckMatvecChain(RandomMatvecChain(DecodingStages(2048, 4, 1), true, 1), 32,
                               uint64_t{1} << 32)
                  .ok());
  EXPECT_EQ(CheckMatvecChain(RandomMatvecChain(DecodingStages(1024, 4, 1), true, 1), 32,
                             uint64_t{1} << 32)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fsdpd::edge
