// How far behind the coordinator is in reading what its workers send, measured on the real
// steady clock by the parts that see it:
//  - the session dispatcher (worker_service.cc) says when the oldest message it still holds was
//    received: a message waits there from its receipt until the job manager handles it;
//  - the ticker (coordinator.cc) and JobManager::Tick say how late a tick ran, and how long it
//    waited for the job manager's lock: a process starved of CPU, or a run that holds the lock,
//    reads nothing while it lasts.
// The job manager reads the lag on every tick and, while it exceeds its bound, suspends its
// lost-worker decisions (job_manager_liveness.cc): silence the coordinator caused is no evidence
// that a worker died. Thread-safe; never blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace fsdpd::server {

class ProcessingLag {
 public:
  using Clock = std::chrono::steady_clock;

  // The receipt time of the oldest message still waiting to be handled, or none.
  void NoteOldestWaiting(Clock::time_point received);
  void NoteNothingWaiting();
  // A stall of this long just ended (a late tick, a long wait for the lock).
  void NoteStall(std::chrono::milliseconds stall);

  // The lag now: the age of the oldest waiting message or the longest stall noted since the
  // previous Take, whichever is larger. Resets the stalls.
  std::chrono::milliseconds Take(Clock::time_point now = Clock::now());
  // The latest value Take returned (for /metrics).
  std::chrono::milliseconds last() const {
    return std::chrono::milliseconds(last_millis_.load(std::memory_order_relaxed));
  }

 private:
  static constexpr int64_t kNone = INT64_MIN;
  std::atomic<int64_t> oldest_waiting_nanos_{kNone};  // steady clock, since its epoch
  std::atomic<int64_t> stall_millis_{0};
  std::atomic<int64_t> last_millis_{0};
};

}  // namespace fsdpd::server
