// GPU time per operation for the Vulkan backend (VulkanOptions::op_times): a timestamp at the
// start of each command buffer and one after every command in it, read back once the buffer
// has run. Each command's time is the interval from the timestamp before it to its own: with a
// barrier after every command (edge/vulkan_context.h), that is the command's run plus the GPU's
// gap in front of it. Time the host spends recording or waiting is in no interval, so the sum
// of all intervals against the wall time shows how much of a run the host costs. Internal to
// edge/.
#pragma once

#include <vulkan/vulkan.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/vulkan_backend.h"

namespace fsdpd::edge {

class OpTimer {
 public:
  // A timer for up to `capacity` commands a command buffer, on a queue family whose timestamps
  // have `valid_bits` bits (0: it cannot time; an error says so) and tick every `period_ns`.
  static absl::StatusOr<std::unique_ptr<OpTimer>> Create(VkDevice device, uint32_t valid_bits,
                                                         double period_ns, uint32_t capacity,
                                                         const std::string& device_name);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // At the start of a command buffer: resets the queries and writes the first timestamp.
  void Begin(VkCommandBuffer commands);
  // After a command (and its barrier): its timestamp, charged to `op`, which must outlive the
  // next Collect (a shader's name).
  void Stamp(VkCommandBuffer commands, const char* op);
  // Whether another Stamp fits in this command buffer.
  bool full() const { return labels_.size() >= capacity_; }
  // Once the command buffer has run: adds its intervals to the totals.
  absl::Status Collect();

  // Host time spent on `what` (a literal: recording commands, writing descriptor sets).
  void AddHost(const char* what, double seconds);

  // Totals since the last Reset, the longest first: the GPU's per op, and the host's.
  std::vector<OpTime> Totals() const;
  std::vector<OpTime> HostTotals() const;
  void Reset() {
    totals_.clear();
    host_totals_.clear();
  }

 private:
  OpTimer() = default;

  VkDevice device_ = VK_NULL_HANDLE;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t capacity_ = 0;
  uint64_t mask_ = 0;  // the valid bits of a timestamp
  double period_ns_ = 1.0;
  std::vector<const char*> labels_;  // this command buffer's commands, in order
  std::vector<uint64_t> stamps_;     // Collect's read buffer
  std::map<std::string, OpTime> totals_;
  std::map<std::string, OpTime> host_totals_;
};

// The host's time in a scope, charged to `what` on `timer` (where not null) when it ends.
class HostSpan {
 public:
  HostSpan(OpTimer* timer, const char* what)
      : timer_(timer), what_(what), start_(std::chrono::steady_clock::now()) {}
  ~HostSpan() {
    if (timer_ == nullptr) return;
    timer_->AddHost(
        what_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  OpTimer* timer_;
  const char* what_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fsdpd::edge
