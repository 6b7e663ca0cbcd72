#include "server/processing_lag.h"

#include <algorithm>

namespace fsdpd::server {

void ProcessingLag::NoteOldestWaiting(Clock::time_point received) {
  oldest_waiting_nanos_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(received.time_since_epoch()).count(),
      std::memory_order_relaxed);
}

void ProcessingLag::NoteNothingWaiting() {
  oldest_waiting_nanos_.store(kNone, std::memory_order_relaxed);
}

void ProcessingLag::NoteStall(std::chrono::milliseconds stall) {
  const int64_t millis = stall.count();
  int64_t seen = stall_millis_.load(std::memory_order_relaxed);
  while (millis > seen && !stall_millis_.compare_exchange_weak(seen, millis)) {
  }
}

std::chrono::milliseconds ProcessingLag::Take(Clock::time_point now) {
  int64_t lag = stall_millis_.exchange(0);
  const int64_t oldest = oldest_waiting_nanos_.load(std::memory_order_relaxed);
  if (oldest != kNone) {
    const int64_t waited =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() -
        oldest;
    lag = std::max(lag, waited / 1000000);
  }
  lag = std::max<int64_t>(lag, 0);
  last_millis_.store(lag, std::memory_order_relaxed);
  return std::chrono::milliseconds(lag);
}

}  // namespace fsdpd::server
