// The edge bench's probes (bench/edge_probes.h) on lavapipe with the validation layer. The two
// matrix probes need workgroup-scope cooperative matrices, which lavapipe lacks, so both are
// refused with the reason; where a device has them (the H200, edge_bench --mma-peak and
// --staged-breakdown) they are positive rates. On any device the breakdown refuses a shape of
// partial blocks, or one whose grid exceeds the device's workgroup counts, by name. The ordering
// probes run here: a chain of dependent dispatches whose every link saw the last, and grid-wide
// barriers that count every arrival, and that give up, saying so, where a workgroup they wait
// for never comes (one workgroup only: lavapipe need not run several at once).
#include "bench/edge_probes.h"

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "bench/edge_shaders/variants.h"
#include "edge/vulkan_context.h"
#include "edge/vulkan_op_checks.h"
#include "gtest/gtest.h"

namespace fsdpd::edge {
namespace {

constexpr const char* kNoCm2 =
    "no workgroup-scope cooperative matrices here (VK_NV_cooperative_matrix2 with fp16)";

std::unique_ptr<VulkanContext> ValidatedContext() {
  VulkanOptions options;
  options.validation = true;
  options.precision = VulkanOptions::Precision::kFp16;
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  EXPECT_TRUE(context.ok()) << "no usable Vulkan device (CI runs on lavapipe): "
                            << context.status();
  return context.ok() ? std::move(*context) : nullptr;
}

// Whether the probes can run here: the device's matrices and this build's probe shaders.
bool ProbesRun(const VulkanContext& context) {
  return context.cm2() && context.fp16() && VariantOf(ProbeShader::kMmaPeakCm2).built();
}

TEST(EdgeMatrixUnitPeakTest, IsARateOnlyWhereWorkgroupScopeMatricesExist) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  absl::StatusOr<double> peak = MatrixUnitPeakTflops(*context);
  if (ProbesRun(*context)) {
    ASSERT_TRUE(peak.ok()) << peak.status();
    EXPECT_GT(*peak, 0.0);
  } else {
    ASSERT_EQ(peak.status().code(), absl::StatusCode::kUnavailable) << peak.status();
    EXPECT_EQ(peak.status().message(), kNoCm2);
  }
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeStagedMatmulBreakdownTest, IsRatesOnlyWhereWorkgroupScopeMatricesExist) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  absl::StatusOr<std::vector<StagedMatmulRate>> rates =
      StagedMatmulBreakdown(*context, 256, 256, 256);
  if (ProbesRun(*context)) {
    ASSERT_TRUE(rates.ok()) << rates.status();
    ASSERT_EQ(rates->size(), 6u);
    for (const StagedMatmulRate& rate : *rates) EXPECT_GT(rate.tflops, 0.0) << rate.what;
  } else {
    ASSERT_EQ(rates.status().code(), absl::StatusCode::kUnavailable) << rates.status();
    EXPECT_EQ(rates.status().message(), kNoCm2);
  }
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeStagedMatmulBreakdownTest, RefusesPartialBlocksAndGridsPastTheDeviceLimit) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  absl::StatusOr<std::vector<StagedMatmulRate>> ragged =
      StagedMatmulBreakdown(*context, 200, 256, 256);
  ASSERT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument) << ragged.status();
  EXPECT_TRUE(absl::StrContains(ragged.status().message(), "needs whole blocks"))
      << ragged.status();
  // One row of 128-row blocks past the device's limit on y; refused before any buffer is made
  // (M × K fp16 would be gigabytes).
  const int64_t rows = 128 * (int64_t{context->limits().maxComputeWorkGroupCount[1]} + 1);
  absl::StatusOr<std::vector<StagedMatmulRate>> tall =
      StagedMatmulBreakdown(*context, rows, 256, 256);
  ASSERT_EQ(tall.status().code(), absl::StatusCode::kInvalidArgument) << tall.status();
  EXPECT_TRUE(absl::StrContains(tall.status().message(), "more than the device allows"))
      << tall.status();
  const int64_t columns = 256 * (int64_t{context->limits().maxComputeWorkGroupCount[0]} + 1);
  absl::StatusOr<std::vector<StagedMatmulRate>> wide =
      StagedMatmulBreakdown(*context, 128, columns, 256);
  ASSERT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument) << wide.status();
  EXPECT_TRUE(absl::StrContains(wide.status().message(), "more than the device allows"))
      << wide.status();
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeDependentDispatchTest, EveryLinkSeesTheLast) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  // The probe checks every count against the links recorded, and fails where one lags. Its
  // figure is a difference of two timings, finite but, on a busy CPU, not surely positive.
  for (const uint32_t groups : {1u, 4u}) {
    absl::StatusOr<double> us = DependentDispatchMicroseconds(*context, groups, 100);
    ASSERT_TRUE(us.ok()) << us.status();
    EXPECT_TRUE(std::isfinite(*us)) << groups << " workgroups";
  }
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeGridBarrierTest, CountsEveryArrivalOfEveryBarrier) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  absl::StatusOr<GridBarrierRun> run = RunGridBarriers(*context, 1, 1, 64, 1u << 12);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_FALSE(run->timed_out);
  EXPECT_EQ(run->arrivals, 64u);
  EXPECT_GT(run->seconds, 0.0);
  absl::StatusOr<double> us = GridBarrierMicroseconds(*context, 1, 100);
  EXPECT_TRUE(us.ok()) << us.status();
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeGridBarrierTest, GivesUpWhereAWorkgroupItWaitsForNeverComes) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  // One workgroup waits for two arrivals: its first spin gives up and it crosses no more.
  absl::StatusOr<GridBarrierRun> run = RunGridBarriers(*context, 1, 2, 5, 1u << 12);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->timed_out);
  EXPECT_EQ(run->arrivals, 1u);
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeOrderingProbesTest, RefuseCountsOutOfRange) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  const uint32_t past = context->limits().maxComputeWorkGroupCount[0] + 1;
  for (const uint32_t groups : {0u, past}) {
    EXPECT_EQ(DependentDispatchMicroseconds(*context, groups).status().code(),
              absl::StatusCode::kInvalidArgument)
        << groups;
    EXPECT_EQ(GridBarrierMicroseconds(*context, groups).status().code(),
              absl::StatusCode::kInvalidArgument)
        << groups;
  }
  EXPECT_EQ(DependentDispatchMicroseconds(*context, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GridBarrierMicroseconds(*context, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunGridBarriers(*context, 1, 1, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunGridBarriers(*context, 1, 1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The count would wrap: 2^31 barriers of 2 arrivals each.
  absl::Status wraps = RunGridBarriers(*context, 1, 2, 1u << 31, 1).status();
  EXPECT_EQ(wraps.code(), absl::StatusCode::kInvalidArgument) << wraps;
  EXPECT_TRUE(absl::StrContains(wraps.message(), "below 2^32")) << wraps;
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

TEST(EdgeBlockGridTest, CountsRaggedBlocksAndRefusesPastEitherLimit) {
  VkPhysicalDeviceLimits limits{};
  limits.maxComputeWorkGroupCount[0] = 10;
  limits.maxComputeWorkGroupCount[1] = 4;
  absl::StatusOr<std::pair<uint32_t, uint32_t>> grid =
      BlockGrid(limits, "linear", 4 * 64, 10 * 32, OutputBlock{64, 32});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(*grid, std::make_pair(10u, 4u));
  grid = BlockGrid(limits, "linear", 3 * 64 + 1, 9 * 32 + 1, OutputBlock{64, 32});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(*grid, std::make_pair(10u, 4u));
  grid = BlockGrid(limits, "linear", 4 * 64 + 1, 32, OutputBlock{64, 32});
  ASSERT_EQ(grid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(grid.status().message(),
            "linear of 257 rows × 32 outputs in 64×32 blocks needs 1 × 5 workgroups, more than "
            "the device allows (10 × 4)");
  grid = BlockGrid(limits, "linear", 64, 10 * 32 + 1, OutputBlock{64, 32});
  ASSERT_EQ(grid.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fsdpd::edge
