// Measurements of what bounds the matmul on a Vulkan device, for bench/edge_bench.cc: the matrix
// units' rate with no memory traffic, and the staged workgroup-scope blocks taken apart into
// their feed and their products. They build their own pipelines (the probe shaders of
// bench/edge_shaders/variants.cmake, beside the runtime's staged blocks) on a VulkanContext of
// their own, time them on their own buffers and compute nothing a model uses. Both need
// workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2 with fp16) and are Unavailable,
// saying so, without them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

// The rate of the matrix units alone through workgroup-scope cooperative matrices (fp16
// products, fp32 sums, matmul_cm2.comp's 128×256 block, no memory traffic), in TFLOP/s: the
// ceiling of every matmul shader; best of three runs after a quarter second of warm-up.
absl::StatusOr<double> MatrixUnitPeakTflops(VulkanContext& context);

// One part of a staged matmul block's time, as the matmul's TFLOP/s for the same shape:
// 2·M·N·K over its time.
struct StagedMatmulRate {
  std::string what;  // "128x128k64cm2h-s, its feed alone"
  double tflops = 0.0;
  // Its pipeline's statistics from the driver (VulkanContext::Statistics), where the context
  // keeps them (VulkanOptions::pipeline_statistics); empty otherwise.
  std::string statistics;
};

// The staged workgroup-scope blocks (128x128k64cm2h-s, 128x256k32cm2h-s) on an M×N×K product of
// whole blocks, each three ways: the matmul; its feed alone (global loads, shared stores and
// barriers, no products); its products alone (fragment loads from shared memory, barriers and
// products, no global loads). Best of three after a quarter second of warm-up. Where the matmul
// runs at the rate of one part alone, that part bounds it. A shape of partial blocks, or of more
// blocks than the device's maxComputeWorkGroupCount allows, is refused on any device.
absl::StatusOr<std::vector<StagedMatmulRate>> StagedMatmulBreakdown(VulkanContext& context,
                                                                    int64_t m, int64_t n,
                                                                    int64_t k);

}  // namespace fsdpd::edge
