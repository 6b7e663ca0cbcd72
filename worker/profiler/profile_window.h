// When a rank profiles, and what it sends at the end: windows come from the job spec
// (profile.start_step, profile.steps) and from the coordinator's ProfileRequests, checked
// between steps. A window's reports are the kernel table first, then the Chrome trace in
// chunks of at most 1 MiB, the last one marked trace_last (what the coordinator's profile
// store expects). Each rank profiles and reports for itself.
//
// With a DeviceProfiler (CUDA), kernels are timed on the device and attributed to the unit and
// phase that launched them; when counters are wanted and the window has at least two steps, its
// first step is the counter step (every kernel replayed for speed-of-light counters) and the
// kernel table's times come from the other steps. Rows without counters get the analytic
// estimate, labelled as such, and the trace says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fsdpd/v1/profile.pb.h"
#include "worker/profiler/chrome_trace.h"
#include "worker/profiler/device_profiler.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/roofline.h"

namespace fsdpd {

// The longest window a request may ask for, as for the job spec's profile.steps.
inline constexpr int64_t kMaxProfileSteps = 1000;

struct ProfileWindowOptions {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string device = "cpu";
  // The analytic roofline's compute peak: the trainer's MFU baseline (on the CPU, the BLAS rate
  // it measured). 0: no roofline.
  double peak_flops_per_second = 0.0;
  // Its memory peak; 0: measured once with MeasureHostMemoryBandwidth when first needed.
  double peak_bytes_per_second = 0.0;
  size_t max_trace_chunk_bytes = kMaxTraceChunkBytes;
  // Device timing and counters on an asynchronous backend; null: host timers.
  DeviceProfiler* device_profiler = nullptr;
};

class ProfileWindow {
 public:
  ProfileWindow(ProfileRecorder* recorder, ProfileWindowOptions options)
      : recorder_(recorder), options_(std::move(options)) {
    recorder_->set_launch_tagger(options_.device_profiler);
  }
  // The device profiler may go before the recorder.
  ~ProfileWindow() { recorder_->set_launch_tagger(nullptr); }
  ProfileWindow(const ProfileWindow&) = delete;
  ProfileWindow& operator=(const ProfileWindow&) = delete;

  // Profiles steps [start_step, start_step + steps); steps are numbered from 1, so a
  // start_step of 0 is taken as 1 and the window still spans `steps` steps. steps ≤ 0
  // schedules nothing. Steps already trained (before a resume) are
  // skipped, so a window cut by a restart reports the steps it really profiled. `counters`:
  // read hardware counters where the device can.
  void Schedule(int64_t start_step, int64_t steps, bool counters = true);

  // A request from the coordinator, between steps; `next_step` is the step about to run.
  // start_step 0, or one already past, means `next_step`. Rejected (with the reason) when it is
  // for another job or attempt, asks for no steps, or a window is already recording.
  absl::Status Request(const v1::ProfileRequest& request, int64_t next_step);

  // Before `step` runs: starts recording when a scheduled window covers it.
  void BeginStep(int64_t step);

  bool recording() const { return recorder_->active(); }

  // After `step` ran: when it is the window's last step, stops recording and returns the
  // window's reports in sending order; otherwise nothing.
  std::vector<v1::ProfileReport> EndStep(int64_t step);

  // When the run ends inside a window: stops recording and returns what the steps so far
  // gave; otherwise nothing.
  std::vector<v1::ProfileReport> Finish();

 private:
  struct Pending {
    int64_t first = 0;  // inclusive
    int64_t end = 0;    // exclusive
    bool counters = true;
  };

  // Ends the recording (and the device's window) and builds the reports.
  std::vector<v1::ProfileReport> Close();
  void BeginDeviceWindow(int64_t step);
  std::vector<v1::ProfileReport> BuildReports();
  v1::ProfileReport Header() const;

  ProfileRecorder* recorder_;
  ProfileWindowOptions options_;
  std::vector<Pending> pending_;
  Pending current_;
  int64_t first_recorded_step_ = 0;
  int64_t recorded_steps_ = 0;
  // This window's device state: whether the device times it, its counter step (0: none), and
  // what the trace says about timing and counters.
  bool device_timed_ = false;
  int64_t counter_step_ = 0;
  int64_t unattributed_kernels_ = 0;
  std::string timing_note_;
  std::string counters_note_;
};

}  // namespace fsdpd
