#include "bench/edge_probe_support.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "base/status_macros.h"

namespace fsdpd::edge {

absl::StatusOr<double> BestSeconds(VulkanContext& context,
                                   const std::function<absl::Status()>& record) {
  FSDPD_RETURN_IF_ERROR(context.Finish());
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  while (std::chrono::steady_clock::now() < warm_until) {
    FSDPD_RETURN_IF_ERROR(record());
    FSDPD_RETURN_IF_ERROR(context.Finish());
  }
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    FSDPD_RETURN_IF_ERROR(record());
    FSDPD_RETURN_IF_ERROR(context.Finish());
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

ScopedPipeline::~ScopedPipeline() {
  context_.Finish().IgnoreError();  // after a failed dispatch something may still be recorded
  context_.DestroyPipeline(&pipeline_);
}

}  // namespace fsdpd::edge
