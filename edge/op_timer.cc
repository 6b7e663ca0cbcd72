#include "edge/op_timer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fsdpd::edge {

absl::StatusOr<std::unique_ptr<OpTimer>> OpTimer::Create(VkDevice device, uint32_t valid_bits,
                                                         double period_ns, uint32_t capacity,
                                                         const std::string& device_name) {
  if (valid_bits == 0 || period_ns <= 0.0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device '", device_name,
        "' cannot time commands on its compute queue (no timestamps there); run without "
        "--op-times"));
  }
  std::unique_ptr<OpTimer> timer(new OpTimer());
  timer->device_ = device;
  timer->capacity_ = capacity;
  timer->mask_ = valid_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << valid_bits) - 1;
  timer->period_ns_ = period_ns;
  timer->labels_.reserve(capacity);
  timer->stamps_.resize(capacity + 1);
  VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = capacity + 1;
  const VkResult created = vkCreateQueryPool(device, &info, nullptr, &timer->pool_);
  if (created != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat("cannot create a timestamp query pool on '",
                                            device_name, "' (VkResult ", created, ")"));
  }
  return timer;
}

OpTimer::~OpTimer() {
  if (pool_ != VK_NULL_HANDLE) vkDestroyQueryPool(device_, pool_, nullptr);
}

void OpTimer::Begin(VkCommandBuffer commands) {
  labels_.clear();
  vkCmdResetQueryPool(commands, pool_, 0, capacity_ + 1);
  vkCmdWriteTimestamp(commands, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 0);
}

void OpTimer::Stamp(VkCommandBuffer commands, const char* op) {
  labels_.push_back(op);
  vkCmdWriteTimestamp(commands, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_,
                      static_cast<uint32_t>(labels_.size()));
}

absl::Status OpTimer::Collect() {
  if (labels_.empty()) return absl::OkStatus();
  const auto count = static_cast<uint32_t>(labels_.size() + 1);
  const VkResult read =
      vkGetQueryPoolResults(device_, pool_, 0, count, count * sizeof(uint64_t), stamps_.data(),
                            sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  if (read != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat("cannot read the op timestamps (VkResult ", read, ")"));
  }
  for (size_t i = 0; i < labels_.size(); ++i) {
    // Masked to the valid bits, the difference is right across one wrap of the counter.
    const uint64_t ticks = ((stamps_[i + 1] & mask_) - (stamps_[i] & mask_)) & mask_;
    OpTime& total = totals_[labels_[i]];
    total.op = labels_[i];
    ++total.count;
    total.seconds += static_cast<double>(ticks) * period_ns_ * 1e-9;
  }
  labels_.clear();
  return absl::OkStatus();
}

void OpTimer::AddHost(const char* what, double seconds) {
  OpTime& total = host_totals_[what];
  total.op = what;
  ++total.count;
  total.seconds += seconds;
}

namespace {

std::vector<OpTime> Longest(const std::map<std::string, OpTime>& by_op) {
  std::vector<OpTime> totals;
  for (const auto& [op, total] : by_op) totals.push_back(total);
  std::sort(totals.begin(), totals.end(),
            [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return totals;
}

}  // namespace

std::vector<OpTime> OpTimer::Totals() const { return Longest(totals_); }

std::vector<OpTime> OpTimer::HostTotals() const { return Longest(host_totals_); }

std::string FormatOpTimes(const std::vector<OpTime>& times, double wall_seconds, int64_t units,
                          const std::string& unit, const std::vector<OpTime>& host) {
  const double per = static_cast<double>(std::max<int64_t>(units, 1));
  double busy = 0.0;
  for (const OpTime& time : times) busy += time.seconds;
  std::string table = absl::StrFormat(
      "GPU time by operation, per %s over %lld: %.3f ms of GPU time in %.3f ms of wall time "
      "(%.0f%%)\n  %10s %10s %9s  %s\n",
      unit, static_cast<long long>(units), busy / per * 1e3, wall_seconds / per * 1e3,
      wall_seconds > 0.0 ? 100.0 * busy / wall_seconds : 0.0, "calls", "ms", "% of GPU", "op");
  for (const OpTime& time : times) {
    absl::StrAppendFormat(&table, "  %10.1f %10.4f %9.1f  %s\n",
                          static_cast<double>(time.count) / per, time.seconds / per * 1e3,
                          busy > 0.0 ? 100.0 * time.seconds / busy : 0.0, time.op);
  }
  if (host.empty()) return table;
  absl::StrAppendFormat(&table, "host time, per %s:\n  %10s %10s %9s  %s\n", unit, "calls", "ms",
                        "% of wall", "on");
  for (const OpTime& time : host) {
    absl::StrAppendFormat(&table, "  %10.1f %10.4f %9.1f  %s\n",
                          static_cast<double>(time.count) / per, time.seconds / per * 1e3,
                          wall_seconds > 0.0 ? 100.0 * time.seconds / wall_seconds : 0.0, time.op);
  }
  return table;
}

}  // namespace fsdpd::edge
