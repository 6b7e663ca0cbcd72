// What the edge bench's probes (bench/edge_probes.h, bench/edge_matvec_chain.h) share: timing a
// recorded piece of work on a VulkanContext, a pipeline that lives as long as its scope, and the
// checks around grid-wide barriers (bench/edge_shaders/grid_barrier.glsl).
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "edge/shader_variant.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

// The fastest of three runs of `record`, each submitted and waited for alone, after a quarter
// second of the same work for an idle GPU's clock to rise (the H200 measured 120 TFLOP/s cold,
// 600 warm; a quarter second does not always cover it there, so callers read a rate more than
// once: bench/edge_bench.cc).
absl::StatusOr<double> BestSeconds(VulkanContext& context,
                                   const std::function<absl::Status()>& record);

// `shader`'s pipeline for as long as it lives; nothing recorded may name it when it goes.
class ScopedPipeline {
 public:
  explicit ScopedPipeline(VulkanContext& context) : context_(context) {}
  ~ScopedPipeline();
  ScopedPipeline(const ScopedPipeline&) = delete;
  ScopedPipeline& operator=(const ScopedPipeline&) = delete;
  absl::Status Make(const ShaderVariant& shader) {
    return context_.MakePipeline(shader, &pipeline_);
  }
  const Pipeline& get() const { return pipeline_; }

 private:
  VulkanContext& context_;
  Pipeline pipeline_;
};

// Reads of the grid-wide barrier's count before a spin gives up: a few seconds on a GPU.
constexpr uint32_t kGridSpinLimit = 1u << 22;

// The workgroups an ordering probe dispatches (one dimension): 1 to the device's
// maxComputeWorkGroupCount[0], and under 2^24 (a count of one uint32 an invocation: 2^31 of
// them at most). INVALID_ARGUMENT otherwise.
absl::Status CheckProbeGroups(const VulkanContext& context, uint32_t groups);

// What a dispatch's grid-wide barriers left: OK where the count reached `expected` arrivals and
// no spin gave up. A spin that gave up (`timed_out`), or a count short of `expected` (lavapipe
// ends a dispatch whose workgroups wait on others that never run), say the same:
// FAILED_PRECONDITION, not all `groups` workgroups ran at once. A count past it: INTERNAL.
absl::Status GridBarrierOutcome(uint32_t groups, uint32_t arrivals, bool timed_out,
                                uint64_t expected);

}  // namespace fsdpd::edge
