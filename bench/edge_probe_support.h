// What the edge bench's probes (bench/edge_probes.h, bench/edge_matvec_chain.h) share: timing a
// recorded piece of work on a VulkanContext, and a pipeline that lives as long as its scope.
#pragma once

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

}  // namespace fsdpd::edge
