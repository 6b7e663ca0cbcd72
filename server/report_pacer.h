// Backpressure on step reports (docs/operations.md, "Overload"). When the coordinator falls
// behind reading its workers, it tells them (CoordinatorMessage.paced_interval_millis, on every
// heartbeat ack) to beat less often and to send their step reports only inside heartbeats
// (Heartbeat.steps). A worker then sends one message an interval however fast it steps: the
// messages, which cost the coordinator most (each is read, dispatched and answered), fall to
// one a worker an interval, and every report still arrives and is stored.
//
// The interval follows the processing lag (processing_lag.h), read once a tick:
//  - lag above `engage_lag`: pacing starts at the heartbeat interval (the steps ride on the
//    beats the worker sends anyway), and doubles every `settle` while the lag stays high, up to
//    `max_interval` (a quarter of the heartbeat timeout, so a worker still beats four times
//    before it could be declared lost);
//  - lag below `calm_lag` for `calm_for`: the interval halves, and from the heartbeat interval
//    goes back to 0 (unpaced: reports as they come, for the live view's sake).
// Between the two bounds nothing changes, so the interval does not flap at its edge.
// Not thread-safe, except interval(); the job manager calls Update under its lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace fsdpd::server {

class ReportPacer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Rules {
    std::chrono::milliseconds heartbeat_interval{1000};
    std::chrono::milliseconds max_interval{2500};
    std::chrono::milliseconds engage_lag{250};
    std::chrono::milliseconds calm_lag{50};
    std::chrono::milliseconds settle{3000};
    std::chrono::milliseconds calm_for{30000};
  };
  // The rules for a coordinator's heartbeat interval and timeout.
  static Rules RulesFor(std::chrono::milliseconds heartbeat_interval,
                        std::chrono::milliseconds heartbeat_timeout);

  explicit ReportPacer(Rules rules) : rules_(rules) {}

  // Reads the lag of this tick; returns a line to log when the interval changed, else "".
  std::string Update(std::chrono::milliseconds lag, Clock::time_point now);
  // The interval workers are told now; 0: unpaced. Any thread.
  std::chrono::milliseconds interval() const {
    return std::chrono::milliseconds(interval_millis_.load(std::memory_order_relaxed));
  }
  // Times pacing started since the coordinator did.
  int64_t engagements() const { return engagements_; }

 private:
  void Set(std::chrono::milliseconds interval, Clock::time_point now);

  const Rules rules_;
  std::atomic<int64_t> interval_millis_{0};
  Clock::time_point changed_at_{};
  // When the lag last went below calm_lag and stayed there; unset while it is not calm.
  Clock::time_point calm_since_{};
  bool calm_ = false;
  int64_t engagements_ = 0;
};

}  // namespace fsdpd::server
