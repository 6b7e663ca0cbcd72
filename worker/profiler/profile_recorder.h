// Collects one rank's profiling window: the kernel table's running totals and the trace's
// events, attributed to the FSDP unit and phase that the trainer and FSDP declare with
// ProfileRange. Outside a window every hook costs one branch. Used from the rank's training
// thread only (ops, collectives and ranges are all issued from it), so it takes no lock.
//
// Times come from a host timer around each call, which is the op's real duration on backends
// whose streams run inline (the CPU backend). An asynchronous backend (CUDA) installs a
// LaunchTagger instead: ops, collectives and ranges then become launch sites, each tagged on the
// device (CUPTI external correlation) while its host code runs, and the device's kernel records
// are attributed to them and added with RecordDeviceKernel when the window ends.
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

// Marks the device work that the host launches between Push and Pop with a site id (> 0).
// Pushes nest; the innermost id is the one a launch carries.
class LaunchTagger {
 public:
  virtual ~LaunchTagger() = default;
  virtual void PushLaunchSite(uint64_t id) = 0;
  virtual void PopLaunchSite() = 0;
};

// Host code that launched device work during a window: an op, a collective, or a range. Site
// ids are 1 + the index in ProfileRecorder::launch_sites(), in opening order, so start_seconds
// never decreases along the vector.
struct LaunchSite {
  std::string name;  // "linear_forward", "all_gather", "layers.0 forward"
  std::string unit;
  std::string phase;
  ProfileLane lane = ProfileLane::kHost;  // ops and collectives: their stream's lane
  bool is_op = false;                     // an op or collective (not a range)
  double start_seconds = 0.0;
  double end_seconds = 0.0;  // still open: < start_seconds
  double flops = -1.0;       // the op's analytic cost, < 0 unknown
  double bytes = -1.0;
  std::string shapes;
};

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
  // With a tagger, ops are timed on the device: RecordOp only annotates launch sites, and the
  // kernel table and trace get their op rows from RecordDeviceKernel. Null: host timers.
  void set_launch_tagger(LaunchTagger* tagger) { tagger_ = tagger; }
  bool device_timed() const { return tagger_ != nullptr; }
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

  // Opens a launch site for the host code that follows, in the current unit and phase (or
  // `phase`), and tags the device work it launches; 0 (and nothing else) when inactive or timed
  // on the host. Every opened site must be closed, innermost first.
  uint64_t OpenSite(std::string_view name, ProfileLane lane, bool is_op,
                    const char* phase = nullptr);
  void CloseSite(uint64_t site);
  const std::vector<LaunchSite>& launch_sites() const { return sites_; }

  // An op or collective that ran from `start_seconds` for `duration_seconds`, in the current
  // unit, and in the current phase unless `phase` is given. Device-timed: only records the
  // op's cost and shapes on `site` (its OpenSite id).
  void RecordOp(const char* name, ProfileLane lane, double start_seconds, double duration_seconds,
                const OpCost* cost, std::string shapes, const char* phase = nullptr,
                uint64_t site = 0);
  // A kernel that ran on the device (device-timed windows): into the table and the trace.
  void RecordDeviceKernel(ProfileEvent event);
  // Counter readings for one launch of a kernel, from a replayed profiling pass.
  void RecordDeviceCounters(const ProfileEvent& event, const CounterRatios& ratios);
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
  LaunchTagger* tagger_ = nullptr;
  std::vector<LaunchSite> sites_;
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
  uint64_t site_ = 0;
};

}  // namespace fsdpd
