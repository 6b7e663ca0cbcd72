// The profiling windows of one run: scheduled from spec.profile, opened on the coordinator's
// requests between steps, timed on the device when the runtime can (a GPU) and by host timers
// otherwise, and sent through TrainerHooks::on_profile as each window closes.
#pragma once

#include <cstdint>
#include <memory>

#include "fsdpd/v1/spec.pb.h"
#include "worker/device/device_runtime.h"
#include "worker/profiler/device_profiler.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/profile_window.h"
#include "worker/rank_context.h"

namespace fsdpd {

class TrainerProfiling {
 public:
  // `recorder` is the engine's; `device_name` the backend's name. Without hooks.on_profile the
  // run is never profiled and nothing is set up.
  TrainerProfiling(const v1::JobSpec& spec, const RankContext& context, const TrainerHooks& hooks,
                   const DeviceRuntime& runtime, ProfileRecorder* recorder,
                   const std::string& device_name, double peak_flops, const DeviceLog& log);
  TrainerProfiling(const TrainerProfiling&) = delete;
  TrainerProfiling& operator=(const TrainerProfiling&) = delete;

  // Before `step`: takes a pending request from the coordinator, then opens a window that
  // covers `step`.
  void BeginStep(int64_t step);
  // After `step`: sends the window's reports when it was its last step.
  void EndStep(int64_t step);
  // After the last step: a window that runs past it reports the steps it saw.
  void Finish();

 private:
  void PollRequest(int64_t step);
  void Send(const std::vector<v1::ProfileReport>& reports);

  const TrainerHooks& hooks_;
  const DeviceLog log_;
  // Declared before the window, which holds a pointer to it.
  std::unique_ptr<DeviceProfiler> device_profiler_;
  std::unique_ptr<ProfileWindow> window_;
};

}  // namespace fsdpd
