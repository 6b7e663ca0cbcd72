// Measurements of what bounds the matmul on a device, for bench/edge_bench.cc: the matrix units'
// rate with no memory traffic, and the staged workgroup-scope blocks taken apart into their feed
// and their products. They run their own pipelines on their own buffers and compute nothing a
// model uses. Internal to edge/ (VulkanBackend forwards to them).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/vulkan_backend.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

// VulkanBackend::MatrixUnitPeakTflops.
absl::StatusOr<double> MatrixUnitPeakTflops(VulkanContext& context);

// VulkanBackend::StagedMatmulBreakdown.
absl::StatusOr<std::vector<StagedMatmulRate>> StagedMatmulBreakdown(VulkanContext& context,
                                                                    int64_t m, int64_t n,
                                                                    int64_t k);

}  // namespace fsdpd::edge
