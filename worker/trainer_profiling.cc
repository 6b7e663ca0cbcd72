#include "worker/trainer_profiling.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fsdpd {

TrainerProfiling::TrainerProfiling(const v1::JobSpec& spec, const RankContext& context,
                                   const TrainerHooks& hooks, const DeviceRuntime& runtime,
                                   ProfileRecorder* recorder, const std::string& device_name,
                                   double peak_flops, const DeviceLog& log)
    : hooks_(hooks), log_(log) {
  ProfileWindowOptions options;
  options.job_id = context.job_id;
  options.attempt = context.attempt;
  options.rank = context.rank;
  options.device = device_name;
  options.peak_flops_per_second = peak_flops;
  // On a GPU, kernels are timed and counted on the device; host timers would time launches.
  if (hooks_.on_profile) {
    device_profiler_ = runtime.CreateDeviceProfiler(context.world_size, peak_flops, log_);
  }
  options.device_profiler = device_profiler_.get();
  window_ = std::make_unique<ProfileWindow>(recorder, std::move(options));
  if (hooks_.on_profile) {
    window_->Schedule(spec.profile().start_step(), spec.profile().steps(),
                      spec.profile().counters());
  }
}

void TrainerProfiling::BeginStep(int64_t step) {
  PollRequest(step);
  window_->BeginStep(step);
}

void TrainerProfiling::EndStep(int64_t step) { Send(window_->EndStep(step)); }

void TrainerProfiling::Finish() { Send(window_->Finish()); }

void TrainerProfiling::PollRequest(int64_t step) {
  if (!hooks_.on_profile || !hooks_.poll_profile_request) return;
  std::optional<v1::ProfileRequest> request = hooks_.poll_profile_request();
  if (!request) return;
  absl::Status accepted = window_->Request(*request, step);
  log_(accepted.ok() ? "info" : "warning",
       accepted.ok() ? absl::StrCat("profiling ", request->steps(), " steps on request")
                     : std::string(accepted.message()));
}

void TrainerProfiling::Send(const std::vector<v1::ProfileReport>& reports) {
  if (reports.empty()) return;
  log_("info", absl::StrFormat("profiled steps %d..%d: %d kernel table rows, trace in %d chunks",
                               reports.front().start_step(),
                               reports.front().start_step() + reports.front().steps() - 1,
                               reports.front().kernels_size(), reports.size() - 1));
  for (const v1::ProfileReport& report : reports) hooks_.on_profile(report);
}

}  // namespace fsdpd
