#include "bench/edge_probe_support.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
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

absl::Status CheckProbeGroups(const VulkanContext& context, uint32_t groups) {
  const uint32_t limit = std::min(context.limits().maxComputeWorkGroupCount[0], 1u << 24);
  if (groups == 0 || groups > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ordering probes take 1 to ", limit, " workgroups; got ", groups));
  }
  return absl::OkStatus();
}

absl::Status GridBarrierOutcome(uint32_t groups, uint32_t arrivals, bool timed_out,
                                uint64_t expected) {
  if (timed_out || arrivals < expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "not all ", groups, " workgroups ran at once here (",
        timed_out ? "a barrier gave up" : absl::StrCat(arrivals, " of ", expected, " arrivals"),
        ")"));
  }
  if (arrivals != expected) {
    return absl::InternalError(absl::StrCat("grid-wide barriers of ", groups,
                                            " workgroups counted ", arrivals, " arrivals, not ",
                                            expected));
  }
  return absl::OkStatus();
}

}  // namespace fsdpd::edge
