// Measurements of what bounds the matmul and decoding on a Vulkan device, for
// bench/edge_bench.cc: the matrix units' rate with no memory traffic; the staged workgroup-scope
// blocks taken apart into their feed and their products; and what ordering ops costs, a
// dispatch each against grid-wide barriers inside one dispatch. They build their own pipelines (the
// probe shaders of bench/edge_shaders/variants.cmake, beside the runtime's staged blocks) on a
// VulkanContext of their own, time them on their own buffers and compute nothing a model uses. Both
// need The matrix probes need workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2 with
// fp16) and are Unavailable, saying so, without them; the ordering probes run on any device.
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

// What one dispatch an op costs before any op does work: a chain of `links` dependent dispatches
// of `groups` workgroups of 128 invocations (sync_chain.comp, each adding one to a count), with
// the barrier VulkanContext::Dispatch records after every command, as decoding records them.
// Microseconds a link: the best of three chains of 2·links less the best of three of `links`,
// over `links`, so that the submit and the wait cancel (after a quarter second of warm-up).
// Every count is then checked to have grown by each link recorded: INTERNAL if one did not.
// groups of 0, past maxComputeWorkGroupCount[0] or past 2^24, or links < 1: INVALID_ARGUMENT.
absl::StatusOr<double> DependentDispatchMicroseconds(VulkanContext& context, uint32_t groups,
                                                     int links = 200);

// One dispatch of `groups` workgroups of 128 invocations, each crossing `barriers` grid-wide
// barriers that wait for `expected_groups` arrivals (grid_barrier.comp), submitted and waited
// for alone. A spin gives up after `spin_limit` reads of the count.
struct GridBarrierRun {
  double seconds = 0.0;    // from recording to the wait's end
  uint32_t arrivals = 0;   // the count at the end: groups · barriers where every barrier passed
  bool timed_out = false;  // a spin gave up: fewer than expected_groups ran at once
};
absl::StatusOr<GridBarrierRun> RunGridBarriers(VulkanContext& context, uint32_t groups,
                                               uint32_t expected_groups, uint32_t barriers,
                                               uint32_t spin_limit);

// What a persistent kernel pays between two ops instead of a dispatch: microseconds a grid-wide
// barrier across `groups` workgroups, the best of three dispatches of 2·barriers less the best
// of three of `barriers`, over `barriers`. FAILED_PRECONDITION where the workgroups did not all
// run at once (a barrier timed out, or the dispatch ended short of its arrivals: a persistent
// kernel cannot use that many here), INTERNAL where the count ends past them, INVALID_ARGUMENT
// for groups or barriers out of range.
absl::StatusOr<double> GridBarrierMicroseconds(VulkanContext& context, uint32_t groups,
                                               int barriers = 200);

}  // namespace fsdpd::edge
