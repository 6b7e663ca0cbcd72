// The edge bench's probes (bench/edge_probes.h) on lavapipe with the validation layer: both need
// workgroup-scope cooperative matrices, which lavapipe lacks, so both are refused with the
// reason; where a device has them (the H200, edge_bench --mma-peak and --staged-breakdown) they
// are positive rates, and the breakdown refuses a shape of partial blocks by name.
#include "bench/edge_probes.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "bench/edge_shaders/variants.h"
#include "edge/vulkan_context.h"
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
    absl::StatusOr<std::vector<StagedMatmulRate>> ragged =
        StagedMatmulBreakdown(*context, 200, 256, 256);
    ASSERT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(ragged.status().message(), "needs whole blocks"))
        << ragged.status();
  } else {
    ASSERT_EQ(rates.status().code(), absl::StatusCode::kUnavailable) << rates.status();
    EXPECT_EQ(rates.status().message(), kNoCm2);
  }
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

}  // namespace
}  // namespace fsdpd::edge
