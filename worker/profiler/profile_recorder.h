// Collects one rank's profiling window: the kernel table's running totals and the trace's
// events, attributed to the FSDP unit and phase that the trainer and FSDP declare with
// ProfileRange. Outside a window every hook costs one branch. Used from the rank's training
// thread only (ops, collectives and ranges are all issued from it), so it takes no lock.
//
// Times come from a host timer around each call, which is the op's real duration on backends
// whose streams run inline (the CPU backend). An asynchronous backend takes its times from
// device activity records instead and uses the recorder for attribution and ranges.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "worker/profiler/kernel_table.h"
#include "worker/profiler/op_cost.h"
#include "worker/profiler/profile_event.h"

namespace fsdpd {

// The trace keeps at most this many events per window (about 200 bytes each in JSON, so at
// most ~10 MiB, or 10 chunks); MiniLLM issues a few hundred ops per step, so this covers
// windows of dozens of steps at any size. Later events still count in the kernel table.
inline constexpr size_t kDefaultMaxTraceEvents = 50000;

class ProfileRecorder {
 public:
  explicit ProfileRecorder(size_t max_trace_events = kDefaultMaxTraceEvents)
      : max_trace_events_(max_trace_events) {}

  bool active() const { return active_; }
  // Starts a new window, dropping what the previous one recorded.
  void Start();
  void Stop() { active_ = false; }

  // Seconds on the steady clock.
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The innermost declared unit and phase; "" outside any.
  const std::string& unit() const;
  const std::string& phase() const;
  void PushScope(std::string unit, std::string phase);
  void PopScope();

  // An op or collective that ran from `start_seconds` for `duration_seconds`, in the current
  // unit, and in the current phase unless `phase` is given.
  void RecordOp(const char* name, ProfileLane lane, double start_seconds, double duration_seconds,
                const OpCost* cost, std::string shapes, const char* phase = nullptr);
  // One of the worker's own ranges (step, unit, phase) on the host lane.
  void RecordRange(std::string name, std::string unit, std::string phase, double start_seconds,
                   double duration_seconds);

  const KernelTableBuilder& table() const { return table_; }
  const std::vector<ProfileEvent>& trace_events() const { return trace_events_; }
  int64_t dropped_trace_events() const { return dropped_trace_events_; }

 private:
  void AddTraceEvent(ProfileEvent event);

  struct Scope {
    std::string unit;
    std::string phase;
  };

  size_t max_trace_events_;
  bool active_ = false;
  std::vector<Scope> scopes_;
  KernelTableBuilder table_;
  std::vector<ProfileEvent> trace_events_;
  int64_t dropped_trace_events_ = 0;
};

// Declares that the work issued while it lives belongs to `unit` and `phase`, and draws it as a
// host range named "<unit> <label>" (label defaults to the phase; empty parts are left out). A
// null or inactive recorder makes it a no-op that copies nothing, so call sites need no checks.
class ProfileRange {
 public:
  ProfileRange(ProfileRecorder* recorder, std::string_view unit, std::string_view phase,
               std::string_view label = {});
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  ProfileRecorder* recorder_ = nullptr;  // null when not recording
  std::string name_;
  std::string unit_;
  std::string phase_;
  double start_seconds_ = 0.0;
};

}  // namespace fsdpd
